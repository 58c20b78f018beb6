// CPU instruction-set levels for kernel dispatch. Detected once from CPUID; MX_CPU_ISA
// (scalar|avx2|avx512|amx) lowers the level for debugging and for testing every variant.
#pragma once

#include <string_view>

namespace mx {

// kAmx: the AVX-512 level with AMX tiles (TMUL int8) beside it.
enum class IsaLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

struct CpuFeatures {
  bool avx2 = false;    // with FMA and F16C
  bool avx512 = false;  // F, BW, VL, DQ
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool avx512_vbmi = false;  // byte permutes (vpermi2b)
  // Whether AVX512-BF16's vdpbf16ps (32 products per instruction) issues at about the rate of
  // vfmadd231ps (16): on AMD's cores (Zen 4: 2.0x the FMAs' products in an eight-row E4M3
  // tile), not on the Intel Xeon measured (a quarter of the FMA's instruction rate).
  bool bf16_dot_at_fma_rate = false;
  // AMX-TILE and AMX-INT8, with the tile data state enabled by the OS and granted to this
  // process (Linux asks for it: arch_prctl ARCH_REQ_XCOMP_PERM).
  bool amx = false;
};

// What the processor and OS support (XSAVE state enabled), ignoring MX_CPU_ISA.
const CpuFeatures& cpu_features();
// The highest level the processor supports.
IsaLevel max_supported_isa();
// The level kernels run at: max_supported_isa(), capped by MX_CPU_ISA when set.
IsaLevel active_isa();
bool isa_supported(IsaLevel level);
std::string_view isa_name(IsaLevel level);
bool parse_isa(std::string_view text, IsaLevel* out);

}  // namespace mx
