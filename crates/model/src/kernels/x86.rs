//! AVX2 + FMA + F16C kernels. Every function requires those features (the caller checks them
//! at run time) and rows of whole blocks with at least as many activation blocks/values.

use std::arch::x86_64::*;

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
