#include "core/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mx {
namespace {

uint64_t read_xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// Linux keeps the 8 KB of tile data out of a process's state until it asks; without the
// grant the first tile instruction faults.
bool request_tile_data() {
#ifdef SYS_arch_prctl
  constexpr int kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool fma = (c >> 12) & 1;
  const bool f16c = (c >> 29) & 1;
  if (!osxsave) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool amx_tile = (d >> 24) & 1, amx_int8 = (d >> 25) & 1;
  const bool avx2 = (b >> 5) & 1;
  const bool bmi2 = (b >> 8) & 1;
  const bool avx512f = (b >> 16) & 1;
  const bool avx512dq = (b >> 17) & 1;
  const bool avx512bw = (b >> 30) & 1;
  const bool avx512vl = (b >> 31) & 1;
  f.avx512_vnni = ((c >> 11) & 1) && zmm_state;
  f.avx512_vbmi = ((c >> 1) & 1) && zmm_state;
  f.avx2 = avx2 && fma && f16c && bmi2 && ymm_state;
  f.avx512 = f.avx2 && avx512f && avx512dq && avx512bw && avx512vl && zmm_state;
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512_bf16 = f.avx512 && ((a >> 5) & 1);
  unsigned vendor[4] = {};
  __cpuid(0, vendor[3], vendor[0], vendor[2], vendor[1]);  // name in EBX, EDX, ECX
  f.bf16_dot_at_fma_rate = f.avx512_bf16 && std::memcmp(vendor, "AuthenticAMD", 12) == 0;
  // XCR0 bits 17 and 18: the tile configuration and tile data states.
  const bool tile_state = ((xcr0 >> 17) & 3) == 3;
  f.amx = f.avx512 && amx_tile && amx_int8 && tile_state && request_tile_data();
  return f;
}

IsaLevel detect_active() {
  IsaLevel level = max_supported_isa();
  if (const char* env = std::getenv("MX_CPU_ISA")) {
    IsaLevel want;
    if (!parse_isa(env, &want)) {
      std::fprintf(stderr, "mxserve: MX_CPU_ISA='%s' is not scalar, avx2, avx512 or amx; ignored\n",
                   env);
    } else if (want < level) {
      level = want;
    }
  }
  return level;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

IsaLevel max_supported_isa() {
  const CpuFeatures& f = cpu_features();
  // The AVX-512 kernels use BF16, VNNI and VBMI instructions, so they need all three.
  if (f.avx512 && f.avx512_bf16 && f.avx512_vnni && f.avx512_vbmi) {
    return f.amx ? IsaLevel::kAmx : IsaLevel::kAvx512;
  }
  if (f.avx2) return IsaLevel::kAvx2;
  return IsaLevel::kScalar;
}

IsaLevel active_isa() {
  static const IsaLevel level = detect_active();
  return level;
}

bool isa_supported(IsaLevel level) { return level <= max_supported_isa(); }

std::string_view isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar:
      return "scalar";
    case IsaLevel::kAvx2:
      return "avx2";
    case IsaLevel::kAvx512:
      return "avx512";
    case IsaLevel::kAmx:
      return "amx";
  }
  return "?";
}

bool parse_isa(std::string_view text, IsaLevel* out) {
  for (IsaLevel l : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAmx}) {
    if (text == isa_name(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

}  // namespace mx
