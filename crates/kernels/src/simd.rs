//! Which instruction set the kernels use: detected once, capped by `KINDLE_SIMD`.

/// Which instruction set a kernel uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Simd {
    /// Portable Rust.
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX2 + FMA + F16C + AVX-VNNI (`vpdpbusd`, VEX-encoded).
    Vnni,
    /// AVX2 + FMA + F16C and AVX-512F, BW, VL and VNNI (not AVX-VNNI): 16-lane `f32` kernels,
    /// 512-bit 8-bit ones.
    Avx512,
}

impl Simd {
    /// The best level this CPU runs, capped by `KINDLE_SIMD` (see [`simd_cap_name`]): the
    /// best the CPU runs at or below the cap.
    pub fn detect() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            use std::sync::OnceLock;
            static DETECTED: OnceLock<Simd> = OnceLock::new();
            *DETECTED.get_or_init(|| {
                let cap = match simd_cap() {
                    Ok(Some(cap)) => cap,
                    _ => Simd::Avx512,
                };
                [Simd::Avx512, Simd::Vnni, Simd::Avx2]
                    .into_iter()
                    .find(|&s| s as u8 <= cap as u8 && s.runs_here())
                    .unwrap_or(Simd::Scalar)
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Simd::Scalar
        }
    }

    /// Whether this CPU has what the level's kernels use. The levels are not nested: AMD's
    /// Zen 4 has AVX-512 with its VNNI (`vpdpbusd` in the EVEX encoding) but not AVX-VNNI (the
    /// VEX one), so it runs `Avx512` and not `Vnni`; the `Avx512` kernels use only the EVEX
    /// form.
    pub(crate) fn runs_here(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            match self {
                Simd::Scalar => true,
                Simd::Avx2 => avx2,
                Simd::Vnni => avx2 && is_x86_feature_detected!("avxvnni"),
                // BW and VL (every AVX-512 CPU but the Xeon Phi's have them): the `Q5` and
                // `Q6_K` kernels use VL's 32 registers and bit selects on 256-bit vectors.
                // VNNI (Ice Lake, Sapphire Rapids, Zen 4 on): the 8-bit kernels' `vpdpbusd`
                // on 512-bit and, with VL, 256-bit vectors.
                Simd::Avx512 => {
                    avx2 && is_x86_feature_detected!("avx512f")
                        && is_x86_feature_detected!("avx512bw")
                        && is_x86_feature_detected!("avx512vl")
                        && is_x86_feature_detected!("avx512vnni")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Simd::Scalar
        }
    }

    /// Every level this CPU runs up to the detected one, portable first (tests compare them).
    #[cfg(test)]
    pub fn available() -> Vec<Simd> {
        [Simd::Scalar, Simd::Avx2, Simd::Vnni, Simd::Avx512]
            .into_iter()
            .filter(|&s| s as u8 <= Simd::detect() as u8 && s.runs_here())
            .collect()
    }

    /// Whether any SIMD level runs (not the portable kernels).
    pub(crate) fn any(self) -> bool {
        self != Simd::Scalar
    }
}

/// Whether this CPU has everything kindle's AVX-512 kernels use (AVX-512F, BW, VL and VNNI
/// beside AVX2, FMA and F16C), whatever `KINDLE_SIMD` caps: a test that checks those kernels
/// fails where the CPU has them and they do not run, and notes that it cannot check them
/// where the CPU lacks them.
pub fn cpu_runs_avx512() -> bool {
    Simd::Avx512.runs_here()
}

/// Whether this CPU runs each 512-bit operation as two 256-bit halves: AMD's Zen 4 (CPUID
/// vendor `AuthenticAMD`, family 0x19; Zen 3, the same family, has no AVX-512). There the
/// AVX-512 `f32` `Q4` kernels hold the rows in the lanes (`x86::q4_512`) instead of looking the
/// weights up by `vpermps` (`x86_512`): measured on a Zen 4, one row 1.2x and nine 1.08x
/// faster. The look-up kernel stays where 512-bit operations run whole (Intel's AVX-512
/// cores, where it was measured fastest; Zen 5, family 0x1A).
pub(crate) fn avx512_in_halves() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static HALVES: OnceLock<bool> = OnceLock::new();
        *HALVES.get_or_init(|| {
            use std::arch::x86_64::__cpuid;
            let vendor = __cpuid(0);
            let amd = (vendor.ebx, vendor.edx, vendor.ecx)
                == (
                    u32::from_le_bytes(*b"Auth"),
                    u32::from_le_bytes(*b"enti"),
                    u32::from_le_bytes(*b"cAMD"),
                );
            let eax = __cpuid(1).eax;
            let base = (eax >> 8) & 0xF;
            let family = if base == 0xF {
                base + ((eax >> 20) & 0xFF)
            } else {
                base
            };
            amd && family == 0x19
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The SIMD level the kernels run with on this CPU, for people: `AVX-512`, `AVX-VNNI`,
/// `AVX2/FMA` or `portable scalar`.
pub fn simd_level() -> &'static str {
    match Simd::detect() {
        Simd::Avx512 => "AVX-512",
        Simd::Vnni => "AVX-VNNI",
        Simd::Avx2 => "AVX2/FMA",
        Simd::Scalar => "portable scalar",
    }
}
/// The CPU for people, as a benchmark prints it beside its figures: the model name, family
/// and model from Linux's `/proc/cpuinfo` (where there is one), and which of the instruction
/// sets the kernels' levels use it has and lacks.
///
/// ```
/// let cpu = kindle_kernels::cpu_summary();
/// assert!(cpu.contains("avx2") || !cfg!(target_arch = "x86_64"), "{cpu}");
/// ```
pub fn cpu_summary() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let mut out = field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string());
    if let (Some(family), Some(model)) = (field("cpu family"), field("model")) {
        out.push_str(&format!(" (family {family}, model {model})"));
    }
    #[cfg(target_arch = "x86_64")]
    {
        let features = [
            ("avx2", is_x86_feature_detected!("avx2")),
            ("fma", is_x86_feature_detected!("fma")),
            ("f16c", is_x86_feature_detected!("f16c")),
            ("avx_vnni", is_x86_feature_detected!("avxvnni")),
            ("avx512f", is_x86_feature_detected!("avx512f")),
            ("avx512bw", is_x86_feature_detected!("avx512bw")),
            ("avx512vl", is_x86_feature_detected!("avx512vl")),
            ("avx512_vnni", is_x86_feature_detected!("avx512vnni")),
        ];
        let list = |has: bool| {
            features
                .iter()
                .filter(|&&(_, h)| h == has)
                .map(|&(name, _)| name)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let (has, lacks) = (list(true), list(false));
        out.push_str(&format!(": {has}"));
        if !lacks.is_empty() {
            out.push_str(&format!("; no {lacks}"));
        }
    }
    out
}

/// The SIMD level `KINDLE_SIMD` caps the kernels at (`avx512`, `vnni`, `avx2` or `scalar`):
/// `Ok(None)` when it is unset, an error naming the value when it is none of those. A cap
/// above what the CPU runs has no effect. For measuring a narrower CPU's kernels on a wider
/// one (the AVX2 kernels on an AVX-512 machine); the kernels read it once, at their first use.
///
/// ```
/// let cap = kindle_kernels::simd_cap_name();
/// match std::env::var("KINDLE_SIMD") {
///     Err(_) => assert_eq!(cap, Ok(None)),
///     Ok(v) if v.eq_ignore_ascii_case("avx2") => assert_eq!(cap, Ok(Some("avx2"))),
///     Ok(_) => {}
/// }
/// ```
pub fn simd_cap_name() -> Result<Option<&'static str>, String> {
    simd_cap().map(|cap| {
        cap.map(|s| match s {
            Simd::Avx512 => "avx512",
            Simd::Vnni => "vnni",
            Simd::Avx2 => "avx2",
            Simd::Scalar => "scalar",
        })
    })
}

/// `KINDLE_SIMD` parsed (see [`simd_cap_name`]).
pub(crate) fn simd_cap() -> Result<Option<Simd>, String> {
    let Ok(value) = std::env::var("KINDLE_SIMD") else {
        return Ok(None);
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "avx512" | "avx-512" => Ok(Some(Simd::Avx512)),
        "vnni" | "avx-vnni" | "avxvnni" => Ok(Some(Simd::Vnni)),
        "avx2" => Ok(Some(Simd::Avx2)),
        "scalar" | "portable" => Ok(Some(Simd::Scalar)),
        other => Err(format!(
            "KINDLE_SIMD={other:?} is not one of avx512, vnni, avx2, scalar"
        )),
    }
}
