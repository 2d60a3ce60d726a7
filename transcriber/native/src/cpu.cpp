// What this CPU can run, as the CPU itself reports it (cpuid through __builtin_cpu_supports,
// which also checks that the OS saves the wider registers), not /proc/cpuinfo: under an
// emulator (qemu-user) that file is the host's, and the host may have instructions the
// emulated CPU lacks. Built without any instruction-set flag, so every CPU can call it.

#define EXPORT extern "C" __attribute__((visibility("default")))

// One bit per feature, in the order of loader.FEATURES.
EXPORT unsigned tk_cpu_features(void) {
  unsigned bits = 0;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool has[] = {
      __builtin_cpu_supports("avx2") != 0,       __builtin_cpu_supports("fma") != 0,
      __builtin_cpu_supports("f16c") != 0,       __builtin_cpu_supports("avx512f") != 0,
      __builtin_cpu_supports("avx512bw") != 0,   __builtin_cpu_supports("avx512vl") != 0,
      __builtin_cpu_supports("avx512dq") != 0,   __builtin_cpu_supports("avx512bf16") != 0,
      __builtin_cpu_supports("avx512vnni") != 0,
  };
  for (unsigned i = 0; i < sizeof(has) / sizeof(has[0]); i++)
    if (has[i]) bits |= 1u << i;
#endif
  return bits;
}
