// One check of every Comm collective, run by each rank of a group (threads or MPI ranks): the
// expected values are formulas of the ranks, so every rank knows what it must receive.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "parallel/comm.h"

namespace mx::test {

// Byte i of what rank `from` sends rank `to`.
inline uint8_t comm_byte(int from, int to, int64_t i) {
  return static_cast<uint8_t>(31 * from + 7 * to + i);
}

// Returns the number of mismatches (0: every collective delivered what it should).
inline int check_collectives(Comm& c) {
  const int n = c.size(), me = c.rank();
  int bad = 0;
  // all_to_all: 5 bytes each way.
  std::vector<uint8_t> send(static_cast<size_t>(5 * n)), recv(send.size());
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 5; ++i) send[static_cast<size_t>(q * 5 + i)] = comm_byte(me, q, i);
  bad += !c.all_to_all(send.data(), recv.data(), 5).is_ok();
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 5; ++i) bad += recv[static_cast<size_t>(q * 5 + i)] != comm_byte(q, me, i);
  // all_to_all_v: rank p sends rank q (p + 2q) % 5 bytes (some zero), packed in q order.
  auto len = [](int p, int q) { return static_cast<int64_t>((p + 2 * q) % 5); };
  std::vector<int64_t> sb(static_cast<size_t>(n)), so(sb.size()), rb(sb.size()), ro(sb.size());
  int64_t s_total = 0, r_total = 0;
  for (int q = 0; q < n; ++q) {
    sb[static_cast<size_t>(q)] = len(me, q);
    so[static_cast<size_t>(q)] = s_total;
    s_total += len(me, q);
    rb[static_cast<size_t>(q)] = len(q, me);
    ro[static_cast<size_t>(q)] = r_total;
    r_total += len(q, me);
  }
  std::vector<uint8_t> vs(static_cast<size_t>(s_total) + 1), vr(static_cast<size_t>(r_total) + 1);
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < len(me, q); ++i)
      vs[static_cast<size_t>(so[static_cast<size_t>(q)] + i)] = comm_byte(me, q, i);
  bad += !c.all_to_all_v(vs.data(), sb.data(), so.data(), vr.data(), rb.data(), ro.data()).is_ok();
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < len(q, me); ++i)
      bad += vr[static_cast<size_t>(ro[static_cast<size_t>(q)] + i)] != comm_byte(q, me, i);
  // all_reduce_sum: identical on every rank, the sum of each rank's values.
  std::vector<double> d = {1.0 + me, 0.1 * me};
  std::vector<int64_t> k = {me, int64_t{1} << (me % 40)};
  bad += !c.all_reduce_sum(d.data(), 2).is_ok();
  bad += !c.all_reduce_sum(k.data(), 2).is_ok();
  double d0 = 0, d1 = 0;
  int64_t k0 = 0, k1 = 0;
  for (int q = 0; q < n; ++q) {
    d0 += 1.0 + q;
    d1 += 0.1 * q;
    k0 += q;
    k1 += int64_t{1} << (q % 40);
  }
  bad += d[0] != d0 || d[1] != d1 || k[0] != k0 || k[1] != k1;
  // The float sum over a length that the ranks do not divide: each element the rank-order
  // sum, 0.0f + rank 0's + rank 1's + ..., in FP32.
  const int64_t fl = 7 * n + 3;
  std::vector<float> f(static_cast<size_t>(fl));
  for (int64_t i = 0; i < fl; ++i)
    f[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i) + 1e-3f * me;
  bad += !c.all_reduce_sum(f.data(), fl).is_ok();
  for (int64_t i = 0; i < fl; ++i) {
    float want = 0.0f;
    for (int q = 0; q < n; ++q) want += 0.1f * static_cast<float>(i) + 1e-3f * q;
    bad += f[static_cast<size_t>(i)] != want;
  }
  // broadcast (and its idle form) from the last rank.
  std::vector<uint8_t> b(9, static_cast<uint8_t>(me));
  bad += !c.broadcast(b.data(), 9, n - 1).is_ok();
  for (uint8_t v : b) bad += v != n - 1;
  int64_t word = me == 0 ? 12345 : -1;
  bad += !c.broadcast_idle(&word, sizeof word, 0).is_ok();
  bad += word != 12345;
  bad += !c.barrier().is_ok();
  return bad;
}

}  // namespace mx::test
