// How the register-tiled GEMMs walk their output: rows in blocks that stay in L2, column
// panels in groups, and row tiles of at most max_rows sized evenly (13 rows: 5 + 4 + 4, not
// 6 + 6 + 1), each tile as many panels wide as panels_for_rows allows for its rows.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace mx {
// Internal linkage: ISA translation units compiled with different flags include this, and a
// shared instantiation (the same table and argument types) could otherwise be linked from the
// widest unit into every caller.
namespace {

// fn(row, rows, panel, panels, cols) for every tile of rows [0, m) and panels
// [p_begin, p_end); cols counts the valid columns from the tile's first panel (output columns
// end at n_end).
template <typename Fn>
void for_each_tile(int64_t m, int64_t p_begin, int64_t p_end, int64_t n_end, int64_t panel_cols,
                   int64_t block_rows, int64_t max_rows, const int* panels_for_rows, Fn&& fn) {
  for (int64_t r0 = 0; r0 < m; r0 += block_rows) {
    const int64_t mb = std::min(block_rows, m - r0);
    const int64_t tiles = (mb + max_rows - 1) / max_rows;
    const int64_t group = panels_for_rows[(mb + tiles - 1) / tiles];
    for (int64_t p = p_begin; p < p_end; p += group) {
      const int64_t panels = std::min(group, p_end - p);
      const int64_t cols = std::min(n_end, (p + panels) * panel_cols) - p * panel_cols;
      for (int64_t t = 0, row = r0; t < tiles; ++t) {
        const int64_t left = r0 + mb - row;
        const int64_t rows = left / (tiles - t) + (left % (tiles - t) != 0);
        const int64_t c = std::min<int64_t>(panels, panels_for_rows[rows]);
        for (int64_t q = 0; q < panels; q += c) {
          fn(row, rows, p + q, std::min(c, panels - q), cols - q * panel_cols);
        }
        row += rows;
      }
    }
  }
}

namespace tile_plan_detail {
template <typename Fn, int R, typename Pick, int... Cs>
constexpr std::array<Fn, sizeof...(Cs) + 1> tile_row(std::integer_sequence<int, Cs...>) {
  return {Fn{}, Pick::template fn<R, Cs + 1>()...};
}
template <typename Fn, int MaxPanels, typename Pick, int... Rs>
constexpr std::array<std::array<Fn, MaxPanels + 1>, sizeof...(Rs) + 1> tile_rows(
    std::integer_sequence<int, Rs...>) {
  return {std::array<Fn, MaxPanels + 1>{},
          tile_row<Fn, Rs + 1, Pick>(std::make_integer_sequence<int, MaxPanels>())...};
}
}  // namespace tile_plan_detail

// A kernel's tile functions by shape, t[rows][panels] for rows 1..MaxRows and panels
// 1..MaxPanels: Pick::fn<R, C>() each (null for a shape the kernel does not compile), null at
// row 0 and panel 0. Instantiated with a translation unit's own Pick, it stays that unit's.
template <typename Fn, int MaxRows, int MaxPanels, typename Pick>
constexpr auto tile_table() {
  return tile_plan_detail::tile_rows<Fn, MaxPanels, Pick>(
      std::make_integer_sequence<int, MaxRows>());
}

// One row's columns [n_begin, n_end) in tiles of C panels of kp columns, a last partial group
// one panel at a time: fn(std::integral_constant<int, panels>, panel, cols), cols counting
// the valid columns from that panel.
template <int C, typename Fn>
void for_each_row_tile(int64_t n_begin, int64_t n_end, int64_t kp, Fn&& fn) {
  const int64_t p_end = (n_end + kp - 1) / kp;
  for (int64_t p = n_begin / kp; p < p_end; p += C) {
    const int64_t cols = std::min(n_end, (p + C) * kp) - p * kp;
    if (p + C <= p_end) {
      fn(std::integral_constant<int, C>{}, p, cols);
    } else {
      for (int64_t q = p; q < p_end; ++q) {
        fn(std::integral_constant<int, 1>{}, q, cols - (q - p) * kp);
      }
    }
  }
}

// Columns [n_begin, n_end) of a GEMM whose arguments `a` have rows a.m, as for_each_tile walks
// them (panels of kP columns, row blocks of 48), each tile through its shape's function.
template <typename Table, typename Args>
void run_tile_table(const Table& tiles, const Args& a, int64_t n_begin, int64_t n_end, int64_t kp,
                    int64_t max_rows, const int* panels_for_rows) {
  for_each_tile(a.m, n_begin / kp, (n_end + kp - 1) / kp, n_end, kp, 48, max_rows, panels_for_rows,
                [&](int64_t row, int64_t rows, int64_t panel, int64_t panels, int64_t cols) {
                  tiles[static_cast<size_t>(rows)][static_cast<size_t>(panels)](a, row, panel,
                                                                                cols);
                });
}

}  // namespace
}  // namespace mx
