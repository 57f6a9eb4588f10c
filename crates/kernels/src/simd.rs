//! Which instruction set the kernels use: detected once, capped by `KINDLE_SIMD`.

/// Which instruction set a kernel uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Simd {
    /// Portable Rust.
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX2 + FMA + F16C + AVX-VNNI (`vpdpbusd`).
    Vnni,
    /// All of the above and AVX-512F, BW, VL and VNNI: 16-lane `f32` kernels, 512-bit 8-bit ones.
    Avx512,
}

impl Simd {
    /// The best level this CPU runs, capped by `KINDLE_SIMD` (see [`simd_cap_name`]).
    pub fn detect() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            use std::sync::OnceLock;
            static DETECTED: OnceLock<Simd> = OnceLock::new();
            *DETECTED.get_or_init(|| {
                let cpu = Simd::detect_cpu();
                match simd_cap() {
                    Ok(Some(cap)) if (cap as u8) < cpu as u8 => cap,
                    _ => cpu,
                }
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Simd::Scalar
        }
    }

    /// The best level this CPU runs.
    fn detect_cpu() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            let vnni = avx2 && is_x86_feature_detected!("avxvnni");
            // BW and VL (every AVX-512 CPU but the Xeon Phi's have them): the `Q5` and `Q6_K`
            // kernels use VL's 32 registers and bit selects on 256-bit vectors. VNNI (every
            // AVX-512 CPU that also has AVX-VNNI): the 8-bit `Q8_0` and `Q4` kernels'
            // 512-bit `vpdpbusd` (`x86_q8_512`).
            let avx512 = is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni");
            if vnni && avx512 {
                Simd::Avx512
            } else if vnni {
                Simd::Vnni
            } else if avx2 {
                Simd::Avx2
            } else {
                Simd::Scalar
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Simd::Scalar
        }
    }

    /// Every level this CPU runs, portable first (tests compare them).
    #[cfg(test)]
    pub fn available() -> Vec<Simd> {
        [Simd::Scalar, Simd::Avx2, Simd::Vnni, Simd::Avx512]
            .into_iter()
            .filter(|&s| s as u8 <= Simd::detect() as u8)
            .collect()
    }

    /// Whether any SIMD level runs (not the portable kernels).
    pub(crate) fn any(self) -> bool {
        self != Simd::Scalar
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
