//! AVX2 + FMA + F16C kernels. Every function requires those features (the caller checks them
//! at run time) and rows of whole blocks with at least as many activation blocks/values.

use std::arch::x86_64::*;

pub(crate) mod q4_512;

use super::q8::BlockQ8;

/// A little-endian `f16` at `p`, widened with F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller passes a pointer to two readable bytes.
    unsafe {
        let bits = u16::from_le_bytes([*p, *p.add(1)]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
    }
}

/// Sum of the eight lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum(v: __m256) -> f32 {
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps::<1>(v);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The 32 nibbles of a 16-byte `Q4` payload as bytes: low nibbles (values 0..16) in the low
/// lane, high nibbles (values 16..32) in the high lane.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller passes a pointer to 16 readable bytes.
    unsafe {
        let qs = _mm_loadu_si128(p as *const __m128i);
        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(qs), qs);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    }
}

/// `Q4_0` row times 8-bit activations.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_0_q8(row: &[u8], y: &[BlockQ8]) -> f32 {
    let ones = _mm256_set1_epi16(1);
    let eight = _mm256_set1_epi8(8);
    let mut acc = _mm256_setzero_ps();
    for (b, y) in row.chunks_exact(18).zip(y) {
        // SAFETY: `b` is one 18-byte block and `y.qs` 32 bytes.
        unsafe {
            let d = f16_at(b.as_ptr()) * y.d;
            let q = nibbles(b.as_ptr().add(2));
            let yv = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            // (q - 8) . y = q . y - 8 . y, both in i16 range.
            let p16 =
                _mm256_sub_epi16(_mm256_maddubs_epi16(q, yv), _mm256_maddubs_epi16(eight, yv));
            let p32 = _mm256_madd_epi16(p16, ones);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p32), acc);
        }
    }
    hsum(acc)
}

/// `Q4_1` row times 8-bit activations.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_1_q8(row: &[u8], y: &[BlockQ8]) -> f32 {
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    let mut mins = 0f32;
    for (b, y) in row.chunks_exact(20).zip(y) {
        // SAFETY: `b` is one 20-byte block and `y.qs` 32 bytes.
        unsafe {
            let d = f16_at(b.as_ptr()) * y.d;
            mins += f16_at(b.as_ptr().add(2)) * y.s;
            let q = nibbles(b.as_ptr().add(4));
            let yv = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            let p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(q, yv), ones);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p32), acc);
        }
    }
    hsum(acc) + mins
}

/// `Q8_0` row times 8-bit activations.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q8_0_q8(row: &[u8], y: &[BlockQ8]) -> f32 {
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    for (b, y) in row.chunks_exact(34).zip(y) {
        // SAFETY: `b` is one 34-byte block and `y.qs` 32 bytes.
        unsafe {
            let d = f16_at(b.as_ptr()) * y.d;
            let w = _mm256_loadu_si256(b.as_ptr().add(2) as *const __m256i);
            let yv = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            // Signed x signed through maddubs: |w| (unsigned) times y carrying w's sign.
            let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(yv, w));
            let p32 = _mm256_madd_epi16(p16, ones);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p32), acc);
        }
    }
    hsum(acc)
}

/// Eight bytes at `v`'s low half widened to `f32` (unsigned when `SIGNED` is false).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn widen<const SIGNED: bool>(v: __m128i) -> __m256 {
    if SIGNED {
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
    } else {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
    }
}

/// `sum(q[i] * x[i])` and `sum(x[i])` over one 32-value block whose quants are the bytes of
/// `q` (lane order = value order).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn block_f32<const SIGNED: bool>(q: __m256i, x: *const f32) -> (__m256, __m256) {
    // SAFETY: the caller passes 32 readable floats.
    unsafe {
        let lo = _mm256_castsi256_si128(q);
        let hi = _mm256_extracti128_si256::<1>(q);
        let x0 = _mm256_loadu_ps(x);
        let x1 = _mm256_loadu_ps(x.add(8));
        let x2 = _mm256_loadu_ps(x.add(16));
        let x3 = _mm256_loadu_ps(x.add(24));
        let mut qx = _mm256_mul_ps(widen::<SIGNED>(lo), x0);
        qx = _mm256_fmadd_ps(widen::<SIGNED>(_mm_srli_si128::<8>(lo)), x1, qx);
        qx = _mm256_fmadd_ps(widen::<SIGNED>(hi), x2, qx);
        qx = _mm256_fmadd_ps(widen::<SIGNED>(_mm_srli_si128::<8>(hi)), x3, qx);
        let xs = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
        (qx, xs)
    }
}

/// `Q4_0` row times `f32` activations.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_0_f32(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (b, x) in row.chunks_exact(18).zip(x.chunks_exact(32)) {
        // SAFETY: `b` is one 18-byte block and `x` 32 values.
        unsafe {
            let d = f16_at(b.as_ptr());
            let (qx, xs) = block_f32::<false>(nibbles(b.as_ptr().add(2)), x.as_ptr());
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), qx, acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(-8.0 * d), xs, acc);
        }
    }
    hsum(acc)
}

/// `Q4_1` row times `f32` activations.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_1_f32(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (b, x) in row.chunks_exact(20).zip(x.chunks_exact(32)) {
        // SAFETY: `b` is one 20-byte block and `x` 32 values.
        unsafe {
            let d = f16_at(b.as_ptr());
            let m = f16_at(b.as_ptr().add(2));
            let (qx, xs) = block_f32::<false>(nibbles(b.as_ptr().add(4)), x.as_ptr());
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), qx, acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(m), xs, acc);
        }
    }
    hsum(acc)
}

/// `Q8_0` row times `f32` activations.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q8_0_f32(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (b, x) in row.chunks_exact(34).zip(x.chunks_exact(32)) {
        // SAFETY: `b` is one 34-byte block and `x` 32 values.
        unsafe {
            let d = f16_at(b.as_ptr());
            let w = _mm256_loadu_si256(b.as_ptr().add(2) as *const __m256i);
            let (qx, _) = block_f32::<true>(w, x.as_ptr());
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), qx, acc);
        }
    }
    hsum(acc)
}

/// `a . b` with four FMA accumulators.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: every load is below `n`.
    unsafe {
        while i + 32 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                let av = _mm256_loadu_ps(a.as_ptr().add(i + 8 * k));
                let bv = _mm256_loadu_ps(b.as_ptr().add(i + 8 * k));
                *acc = _mm256_fmadd_ps(av, bv, *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            let av = _mm256_loadu_ps(a.as_ptr().add(i));
            let bv = _mm256_loadu_ps(b.as_ptr().add(i));
            acc[0] = _mm256_fmadd_ps(av, bv, acc[0]);
            i += 8;
        }
    }
    let total = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut sum = hsum(total);
    for j in i..n {
        sum += a[j] * b[j];
    }
    sum
}

/// The kernels over [`super::packed`] groups of eight rows, once per instruction set: `avx2`
/// (`maddubs` + `madd`) and `vnni` (AVX-VNNI `vpdpbusd`, one instruction for both). Each
/// computes the eight rows of one group against `JN` activation rows at once (the weights are
/// decoded once per block for all of them) and writes the eight results of activation row `j`
/// to `out[j]` in the lane order [`super::packed::LANE_ROWS`]. The arithmetic of one output
/// does not depend on `JN`, so a row gives the same bits alone (decode) and in a batch.
macro_rules! group_kernels {
    ($module:ident, $features:tt, $vnni:expr) => {
        pub(crate) mod $module {
            use std::arch::x86_64::*;

            use super::super::columns::{SuperBlock, column, for_each_column};
            use super::super::packed::LANE_ROWS;
            use super::super::prefetch::prefetch_ahead;
            use super::super::q8::BlockQ8;

            /// `lo . ylo + hi . yhi` per 32-bit lane: unsigned 4-bit weights times signed
            /// 8-bit activations.
            #[target_feature(enable = $features)]
            #[inline]
            #[allow(unused_unsafe)]
            fn dot_u4_pair(lo: __m256i, ylo: __m256i, hi: __m256i, yhi: __m256i) -> __m256i {
                if $vnni {
                    let zero = _mm256_setzero_si256();
                    // SAFETY: this branch runs only in the instance whose features have AVX-VNNI.
                    unsafe {
                        _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(zero, lo, ylo), hi, yhi)
                    }
                } else {
                    // Each 16-bit pair sum is at most 2 * 15 * 127, so two of them still fit.
                    let p16 = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, ylo),
                        _mm256_maddubs_epi16(hi, yhi),
                    );
                    _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
                }
            }

            /// `w . y` per 32-bit lane, both signed 8-bit: `|w|` (unsigned) times `y` carrying
            /// `w`'s sign.
            #[target_feature(enable = $features)]
            #[inline]
            #[allow(unused_unsafe)]
            fn dot_i8(abs_w: __m256i, w: __m256i, y: __m256i) -> __m256i {
                let signed_y = _mm256_sign_epi8(y, w);
                if $vnni {
                    // SAFETY: this branch runs only in the instance whose features have AVX-VNNI.
                    unsafe { _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), abs_w, signed_y) }
                } else {
                    _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w, signed_y), _mm256_set1_epi16(1))
                }
            }

            /// The last steps of reducing eight vectors `v[s]` to one whose lane `s` is the sum
            /// of `v[s]`'s lanes, from `h[i] = hadd(v[2i], v[2i + 1])`.
            #[target_feature(enable = $features)]
            #[inline]
            fn sum_quads(h: [__m256; 4]) -> __m256 {
                let a = _mm256_hadd_ps(h[0], h[1]);
                let b = _mm256_hadd_ps(h[2], h[3]);
                _mm256_add_ps(
                    _mm256_permute2f128_ps::<0x20>(a, b),
                    _mm256_permute2f128_ps::<0x31>(a, b),
                )
            }

            /// As [`sum_quads`] for 32-bit integers.
            #[target_feature(enable = $features)]
            #[inline]
            fn sum_quads_i32(h: [__m256i; 4]) -> __m256i {
                let a = _mm256_hadd_epi32(h[0], h[1]);
                let b = _mm256_hadd_epi32(h[2], h[3]);
                _mm256_add_epi32(
                    _mm256_permute2x128_si256::<0x20>(a, b),
                    _mm256_permute2x128_si256::<0x31>(a, b),
                )
            }

            /// `w[0] x[0..8] + ... + w[3] x[24..32]`, lane by lane.
            ///
            /// # Safety
            /// `x` points to 32 readable floats.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn dot4(w: [__m256; 4], x: *const f32) -> __m256 {
                // SAFETY: the caller passes 32 readable floats.
                unsafe {
                    let mut t = _mm256_mul_ps(w[0], _mm256_loadu_ps(x));
                    t = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x.add(8)), t);
                    t = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x.add(16)), t);
                    _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x.add(24)), t)
                }
            }

            /// A `Q4_1` group (`nb` block columns at `w`; `F` another format of that form,
            /// `super::super::columns`) times `JN` rows of 8-bit activation blocks.
            ///
            /// # Safety
            /// `w` holds `nb` block columns of `F` and every `ys[j]` at least `nb` blocks.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn q4_1_q8<const JN: usize, const F: u8>(
                w: *const u8,
                nb: usize,
                ys: [&[BlockQ8]; JN],
                out: &mut [[f32; 8]; JN],
            ) {
                let mask = _mm256_set1_epi8(0x0F);
                let mut acc = [_mm256_setzero_ps(); JN];
                let mut acc_min = [_mm256_setzero_ps(); JN];
                let mut sb = SuperBlock::for_8_bit();
                for_each_column::<F>(0..nb, |b| {
                    // SAFETY: block column `b` lies within the caller's `nb` columns, and
                    // each activation row has block `b`.
                    unsafe {
                        let (qs, d, m) = column::<F>(w, b, &mut sb);
                        // Rows (2k, 2k+1) in the two 128-bit lanes.
                        let mut lo = [_mm256_setzero_si256(); 4];
                        let mut hi = [_mm256_setzero_si256(); 4];
                        for k in 0..4 {
                            let v = _mm256_loadu_si256(qs.add(32 * k) as *const __m256i);
                            lo[k] = _mm256_and_si256(v, mask);
                            hi[k] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask);
                        }
                        for j in 0..JN {
                            let y = ys[j].get_unchecked(b);
                            let q = y.qs.as_ptr();
                            let ylo =
                                _mm256_broadcastsi128_si256(_mm_loadu_si128(q as *const __m128i));
                            let yhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                                q.add(16) as *const __m128i
                            ));
                            let p0 = dot_u4_pair(lo[0], ylo, hi[0], yhi);
                            let p1 = dot_u4_pair(lo[1], ylo, hi[1], yhi);
                            let p2 = dot_u4_pair(lo[2], ylo, hi[2], yhi);
                            let p3 = dot_u4_pair(lo[3], ylo, hi[3], yhi);
                            // Lanes [r0 r2 r4 r6 | r1 r3 r5 r7] = LANE_ROWS.
                            let sums = _mm256_cvtepi32_ps(_mm256_hadd_epi32(
                                _mm256_hadd_epi32(p0, p1),
                                _mm256_hadd_epi32(p2, p3),
                            ));
                            let scale = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                            acc[j] = _mm256_fmadd_ps(scale, sums, acc[j]);
                            acc_min[j] = _mm256_fmadd_ps(m, _mm256_set1_ps(y.s), acc_min[j]);
                        }
                    }
                });
                for j in 0..JN {
                    // SAFETY: `out[j]` holds eight floats.
                    unsafe {
                        _mm256_storeu_ps(out[j].as_mut_ptr(), _mm256_add_ps(acc[j], acc_min[j]))
                    };
                }
            }

            /// A `Q8_0` group (`nb` block columns of 272 bytes at `w`) times `JN` rows of 8-bit
            /// activation blocks.
            ///
            /// # Safety
            /// `w` holds `nb * 272` bytes and every `ys[j]` at least `nb` blocks.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn q8_0_q8<const JN: usize>(
                w: *const u8,
                nb: usize,
                ys: [&[BlockQ8]; JN],
                out: &mut [[f32; 8]; JN],
            ) {
                let mut acc = [_mm256_setzero_ps(); JN];
                let prefetch = super::super::prefetch::fast_kernels();
                for b in 0..nb {
                    // SAFETY: as in `q4_1_q8`, with 272-byte block columns.
                    unsafe {
                        let col = w.add(b * 272);
                        if prefetch {
                            prefetch_ahead(col, 272);
                        }
                        let d = _mm256_cvtph_ps(_mm_loadu_si128(col as *const __m128i));
                        let yv: [__m256i; JN] = std::array::from_fn(|j| {
                            let q = ys[j].get_unchecked(b).qs.as_ptr();
                            _mm256_loadu_si256(q as *const __m256i)
                        });
                        // Rows two at a time, reduced pairwise at once: few registers live.
                        let mut h = [[_mm256_setzero_si256(); 4]; JN];
                        for pair in 0..4 {
                            let p0 = col.add(16 + 32 * LANE_ROWS[2 * pair]);
                            let p1 = col.add(16 + 32 * LANE_ROWS[2 * pair + 1]);
                            let w0 = _mm256_loadu_si256(p0 as *const __m256i);
                            let w1 = _mm256_loadu_si256(p1 as *const __m256i);
                            let (a0, a1) = (_mm256_sign_epi8(w0, w0), _mm256_sign_epi8(w1, w1));
                            for j in 0..JN {
                                h[j][pair] =
                                    _mm256_hadd_epi32(dot_i8(a0, w0, yv[j]), dot_i8(a1, w1, yv[j]));
                            }
                        }
                        for j in 0..JN {
                            let y = ys[j].get_unchecked(b);
                            let sums = _mm256_cvtepi32_ps(sum_quads_i32(h[j]));
                            let scale = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                            acc[j] = _mm256_fmadd_ps(scale, sums, acc[j]);
                        }
                    }
                }
                for j in 0..JN {
                    // SAFETY: `out[j]` holds eight floats.
                    unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), acc[j]) };
                }
            }

            /// A `Q4_1` group times `JN` rows of `f32` activations. `xs[j]` is activation row
            /// `j` with each block's values in the order [`super::Q4_LANE_ORDER`], scaled by
            /// [`super::Q4_SCALE`] and each held eight times (`Kernel::copies`); `sums[j]`
            /// its per-block sums.
            ///
            /// The eight rows' 16 quant bytes of a block column are transposed once (eight
            /// shuffles) so that lane `s` of word `g` holds word `g` of row `LANE_ROWS[s]`;
            /// each of the word's eight nibbles is then masked in place (of the word shifted
            /// by 0, 12 or 24 bits), converted, and multiplied into the eight rows at once by
            /// one activation held in all eight lanes (a load folded into the FMA): an `and`,
            /// a conversion and an FMA per eight weights, no horizontal sums. The words run
            /// one after another, and each activation row's products go into four chains by
            /// nibble position (`p % 4`: positions `p` and `p + 4` of every word, eight
            /// products a block), added `(c0 + c1) + (c2 + c3)`, then scaled by the rows'
            /// `d`: the same order for every `JN`, and `4 * JN` independent FMAs with one word
            /// live.
            ///
            /// Measured on a Zen 3 (criterion, one thread, 1536 x 576): 106-114 us with the
            /// rows' products reduced across lanes (the form before), 77-86 us transposed with
            /// broadcast activations, 69-74 us with the copies (a `vbroadcastss` costs a Zen 3
            /// about half a cycle of a vector pipe, the conversion about one), 52-58 us with
            /// one activation row's four chains interleaved (64 us one word after another:
            /// each chain of eight dependent FMAs then waited out their latency; eight chains
            /// of four, to shorten them further, spilled and ran 62-84 us). Reading the
            /// masked word as a subnormal `f32` instead of converting it was 1.8x slower there:
            /// a Zen 3 multiplies subnormals slowly. The chains by position instead of by word
            /// (the words then one at a time, where two rows had taken two words at a time
            /// and spilled): one row the same, two rows 95-101 -> 83-93 us, four 185-209 ->
            /// 170-189 (2026-11-29 (3) in docs/performance.md, with the step's ceiling).
            ///
            /// # Safety
            /// `w` holds `nb` block columns of `F`, every `xs[j]` at least `32 * nb` values and every
            /// `sums[j]` at least `nb`.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn q4_1_f32<const JN: usize, const F: u8>(
                w: *const u8,
                nb: usize,
                xs: [&[f32]; JN],
                sums: [&[f32]; JN],
                out: &mut [[f32; 8]; JN],
            ) {
                let masks = [
                    _mm256_set1_epi32(0xF),
                    _mm256_set1_epi32(0xF0),
                    _mm256_set1_epi32(0xF00),
                ];
                let mut acc = [_mm256_setzero_ps(); JN];
                let mut acc_min = [_mm256_setzero_ps(); JN];
                let mut sb = SuperBlock::new();
                for_each_column::<F>(0..nb, |b| {
                    // SAFETY: block column `b` lies within the `nb` columns (128 quant bytes
                    // at `qs`); activation block `b` within `32 * nb` values.
                    unsafe {
                        let (qs, d, m) = column::<F>(w, b, &mut sb);
                        let pair = |i: usize| _mm256_loadu_si256(qs.add(32 * i) as *const __m256i);
                        let (r01, r23, r45, r67) = (pair(0), pair(1), pair(2), pair(3));
                        // Words 0, 1 / 2, 3 of rows (0, 2 | 1, 3) and (4, 6 | 5, 7), then
                        // word g of rows (0, 2, 4, 6 | 1, 3, 5, 7) = LANE_ROWS.
                        let t0 = _mm256_unpacklo_epi32(r01, r23);
                        let t1 = _mm256_unpackhi_epi32(r01, r23);
                        let t2 = _mm256_unpacklo_epi32(r45, r67);
                        let t3 = _mm256_unpackhi_epi32(r45, r67);
                        let words = [
                            _mm256_unpacklo_epi64(t0, t2),
                            _mm256_unpackhi_epi64(t0, t2),
                            _mm256_unpacklo_epi64(t1, t3),
                            _mm256_unpackhi_epi64(t1, t3),
                        ];
                        // One word at a time; each row's products in four chains, position
                        // `p` of every word into chain `p % 4`, so that `4 * JN` FMAs are
                        // in flight and one word is live. Each chain sums in the same order
                        // for every `JN`.
                        let mut c = [[_mm256_setzero_ps(); 4]; JN];
                        for (g, &word) in words.iter().enumerate() {
                            let mut part = word;
                            for p in 0..8 {
                                if p == 3 || p == 6 {
                                    part = _mm256_srli_epi32::<12>(part);
                                }
                                let wq = _mm256_cvtepi32_ps(_mm256_and_si256(part, masks[p % 3]));
                                for j in 0..JN {
                                    let x = _mm256_loadu_ps(
                                        xs[j].as_ptr().add(8 * (32 * b + 8 * g + p)),
                                    );
                                    c[j][p % 4] = if g == 0 && p < 4 {
                                        _mm256_mul_ps(wq, x)
                                    } else {
                                        _mm256_fmadd_ps(wq, x, c[j][p % 4])
                                    };
                                }
                            }
                        }
                        for j in 0..JN {
                            let block = _mm256_add_ps(
                                _mm256_add_ps(c[j][0], c[j][1]),
                                _mm256_add_ps(c[j][2], c[j][3]),
                            );
                            acc[j] = _mm256_fmadd_ps(d, block, acc[j]);
                            let sum = _mm256_set1_ps(*sums[j].get_unchecked(b));
                            acc_min[j] = _mm256_fmadd_ps(m, sum, acc_min[j]);
                        }
                    }
                });
                for j in 0..JN {
                    // SAFETY: `out[j]` holds eight floats.
                    unsafe {
                        _mm256_storeu_ps(out[j].as_mut_ptr(), _mm256_add_ps(acc[j], acc_min[j]))
                    };
                }
            }

            /// A `Q8_0` group times `JN` rows of `f32` activations (natural order).
            ///
            /// Each row keeps its own eight lanes of partial sums across the blocks (a
            /// block's four products a lane, scaled by the row's `d` held in all lanes), and
            /// the rows' lanes are summed across once, at the end: one permute and one FMA a
            /// row and block in place of the pairwise horizontal sums of every block (on a Zen
            /// 3, criterion one thread, `rows_q8_0_4096x576`: m = 2 1.2x, m = 9 1.4x faster;
            /// a 49152-row head at m = 1 reads at memory bandwidth either way). The same order
            /// for every `JN`.
            ///
            /// # Safety
            /// `w` holds `nb * 272` bytes and every `xs[j]` at least `32 * nb` values.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn q8_0_f32<const JN: usize>(
                w: *const u8,
                nb: usize,
                xs: [&[f32]; JN],
                out: &mut [[f32; 8]; JN],
            ) {
                // `acc[j][s]`: the lanes of row `LANE_ROWS[s]`, whose `d` is lane `s`.
                let mut acc = [[_mm256_setzero_ps(); 8]; JN];
                let prefetch = super::super::prefetch::fast_kernels();
                for b in 0..nb {
                    // SAFETY: as in `q4_1_f32`, with 272-byte block columns.
                    unsafe {
                        let col = w.add(b * 272);
                        if prefetch {
                            prefetch_ahead(col, 272);
                        }
                        let d = _mm256_cvtph_ps(_mm_loadu_si128(col as *const __m128i));
                        for s in 0..8 {
                            let p = col.add(16 + 32 * LANE_ROWS[s]);
                            let wq: [__m256; 4] = std::array::from_fn(|k| {
                                let bytes = _mm_loadl_epi64(p.add(8 * k) as *const __m128i);
                                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes))
                            });
                            let ds = _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(s as i32));
                            for j in 0..JN {
                                let x = xs[j].as_ptr().add(32 * b);
                                acc[j][s] = _mm256_fmadd_ps(ds, dot4(wq, x), acc[j][s]);
                            }
                        }
                    }
                }
                for j in 0..JN {
                    let h: [__m256; 4] = std::array::from_fn(|pair| {
                        _mm256_hadd_ps(acc[j][2 * pair], acc[j][2 * pair + 1])
                    });
                    // SAFETY: `out[j]` holds eight floats.
                    unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), sum_quads(h)) };
                }
            }
        }
    };
}

group_kernels!(avx2, "avx2,fma,f16c", false);
group_kernels!(vnni, "avx2,fma,f16c,avxvnni", true);

/// The order of a `Q4_1` block's 32 activation values that the AVX-512 `f32` group kernels
/// read: 8-lane vector `k` of a block meets one nibble position of the broadcast quant words.
pub(crate) const Q4_ORDER: [usize; 32] = [
    0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 16, 20, 24, 28, 17, 21, 25, 29, 18, 22,
    26, 30, 19, 23, 27, 31,
];

/// One block of 32 activations quantized as [`super::q8::quantize_block_scalar`] does, to the
/// same bits: the same scale arithmetic, and rounding half away from zero.
///
/// # Safety
/// AVX2, FMA and F16C must be available and `x` must hold 32 values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_block_q8(x: &[f32]) -> BlockQ8 {
    // SAFETY: `x` holds 32 values (caller).
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        let v: [__m256; 4] = std::array::from_fn(|k| _mm256_loadu_ps(x.as_ptr().add(8 * k)));
        let abs = |a: __m256| _mm256_andnot_ps(sign, a);
        let max = _mm256_max_ps(
            _mm256_max_ps(abs(v[0]), abs(v[1])),
            _mm256_max_ps(abs(v[2]), abs(v[3])),
        );
        let max4 = _mm_max_ps(_mm256_castps256_ps128(max), _mm256_extractf128_ps::<1>(max));
        let max2 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
        let amax = _mm_cvtss_f32(_mm_max_ss(max2, _mm_movehdup_ps(max2)));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let ids = _mm256_set1_ps(id);
        let q: [__m256i; 4] = std::array::from_fn(|k| {
            let p = _mm256_mul_ps(v[k], ids);
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
            // Away from zero when the dropped fraction is at least one half.
            let half = _mm256_cmp_ps::<_CMP_GE_OQ>(abs(_mm256_sub_ps(p, t)), _mm256_set1_ps(0.5));
            let step = _mm256_or_ps(_mm256_and_ps(p, sign), _mm256_set1_ps(1.0));
            _mm256_cvtps_epi32(_mm256_add_ps(t, _mm256_and_ps(half, step)))
        });
        let total = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let t4 = _mm_add_epi32(
            _mm256_castsi256_si128(total),
            _mm256_extracti128_si256::<1>(total),
        );
        let t2 = _mm_add_epi32(t4, _mm_shuffle_epi32::<0b01_00_11_10>(t4));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(t2, _mm_shuffle_epi32::<0b10_11_00_01>(t2)));
        let bytes = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        let mut block = BlockQ8 {
            d,
            s: d * sum as f32,
            qs: [0; 32],
        };
        _mm256_storeu_si256(block.qs.as_mut_ptr() as *mut __m256i, bytes);
        block
    }
}

/// The order of a `Q4_1` block's 32 activation values that the AVX2 `f32` group kernels
/// read: position `8 g + p` is nibble `p` of quant word `g` (byte `4 g + p / 2`, its low
/// nibble the value of that index, its high nibble the value 16 further).
pub(crate) const Q4_LANE_ORDER: [usize; 32] = {
    let mut order = [0; 32];
    let mut i = 0;
    while i < 32 {
        let (g, p) = (i / 8, i % 8);
        order[i] = 4 * g + p / 2 + 16 * (p % 2);
        i += 1;
    }
    order
};

/// The bit at which the AVX2 `f32` `Q4_1` kernels leave nibble `p` of a word (masked in place
/// in the word shifted by 0, 12 or 24 bits).
const fn q4_lane_bit(p: usize) -> i32 {
    4 * (p % 3) as i32
}

/// The factor each position of a [`Q4_LANE_ORDER`]ed block is scaled by for the AVX2 `f32`
/// `Q4_1` kernels: they multiply `q * 2^s` for a nibble left at bit `s`, so they
/// need `x * 2^-s`. Both products are exact (powers of two), so the sums are those of `q x`.
pub(crate) const Q4_SCALE: [f32; 32] = {
    let mut scale = [0f32; 32];
    let mut i = 0;
    while i < 32 {
        scale[i] = f32::from_bits(((127 - q4_lane_bit(i % 8)) as u32) << 23);
        i += 1;
    }
    scale
};
