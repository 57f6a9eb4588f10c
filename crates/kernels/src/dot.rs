//! Choosing a kernel for a weight type and applying it to a range of rows.

use super::dense::{Dense, dense_tile, dot_rows, in_place};
use super::packed::{self, GROUP, Packing};
use super::q8::BlockQ8;
use super::scalar;
pub(crate) use super::simd::Simd;
use kindle_gguf::quant::{self, GgmlType};

/// The activations of one product, in the forms the kernels read.
#[derive(Clone, Copy)]
pub(crate) struct Activations<'a> {
    /// `[m, cols]` row-major.
    pub f32: &'a [f32],
    /// `[m, cols / 32]` blocks (empty for an `f32` kernel).
    pub q8: &'a [BlockQ8],
    /// The scales `d` of [`Activations::q8`], laid out alike.
    pub q8_d: &'a [f32],
    /// The sums `s` of [`Activations::q8`], laid out alike.
    pub q8_s: &'a [f32],
    /// `32 *` the sum of each 16 quants of [`Activations::q8`] (two a block), for a kernel
    /// that [`wants_half_sums`](Kernel::wants_half_sums) (empty otherwise).
    pub q8_halves: &'a [i32],
    /// For the SIMD `f32` kernels of the packed types: `f32` with each block's
    /// values in the order and scaling [`Kernel::permutation`] gives, each held
    /// [`Kernel::copies`] times (empty otherwise, and until the thread running a task has
    /// made its own: `Kernel::permute_into`, `copies.rs`).
    pub permuted: &'a [f32],
    /// For the same kernels: block sums of `f32` (empty otherwise).
    pub block_sums: &'a [f32],
    /// For the prefill product: `f32` in its panels (`gemm::pack_activations`; empty otherwise).
    pub panels: &'a [f32],
    /// Values per activation row.
    pub cols: usize,
    /// Activation rows.
    pub m: usize,
}

/// The order of a `Q4_1` block's 32 activation values that the SIMD `f32` group kernel reads.
#[cfg(target_arch = "x86_64")]
pub(crate) use super::x86::Q4_ORDER;
/// The order of a `Q4_1` block's 32 activation values that the SIMD `f32` group kernel reads.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) const Q4_ORDER: [usize; 32] = {
    let mut order = [0; 32];
    let mut i = 0;
    while i < 32 {
        order[i] = i;
        i += 1;
    }
    order
};

/// A weight matrix as the kernels see it.
pub(crate) struct Weights<'a> {
    pub ty: GgmlType,
    pub data: &'a [u8],
    /// Bytes of one plain row.
    pub row_bytes: usize,
    /// Where the groups lie, for a packed matrix.
    pub packing: Option<Packing>,
}

impl Weights<'_> {
    /// Where plain row `r` starts: a row of an unpacked matrix, or one of the `rows % 8` left
    /// after a packed matrix's groups (which may be larger than the file's rows: `IQ4_XS`).
    fn plain_row_at(&self, r: usize) -> usize {
        match self.packing {
            Some(p) if r >= p.grouped_rows => {
                p.grouped_rows / GROUP * p.group_bytes() + (r - p.grouped_rows) * self.row_bytes
            }
            _ => r * self.row_bytes,
        }
    }
}

/// Activation rows a group kernel takes at once (each weight block is decoded once for all).
const MAX_JN: usize = 8;

/// How one weight row meets one activation row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// Integer dot products against 8-bit activations (`Q4_0`, `Q4_1`, `Q8_0`).
    Int8 { ty: GgmlType, simd: Simd },
    /// `f32` dot products, weights dequantised on the fly.
    F32 { ty: GgmlType, simd: Simd },
}

impl Kernel {
    /// The kernel for `ty` with activations in `format`, SIMD where the CPU has it.
    pub fn select(ty: GgmlType, format: super::ActivationFormat) -> Self {
        Self::select_simd(ty, format, Simd::detect())
    }

    /// As [`Kernel::select`], with a given instruction set (tests compare them).
    pub fn select_simd(ty: GgmlType, format: super::ActivationFormat, simd: Simd) -> Self {
        // `Q4_K`, `Q5_K` (packed as `Q4_1`, `Q5_1`), `Q6_K`, `Q3_K`, `Q2_K`, `IQ4_NL` and
        // `IQ4_XS` (packed in forms of their own) and the grid quants (read as in the file)
        // have 8-bit kernels only with SIMD.
        let int8_type = matches!(
            ty,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 | GgmlType::Q5_0 | GgmlType::Q5_1
        ) || ((k_quant(ty)
            || iq4(ty)
            || super::grid::grid(ty)
            || matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K))
            && simd.any());
        if format == super::ActivationFormat::Int8 && int8_type {
            Kernel::Int8 { ty, simd }
        } else {
            Kernel::F32 { ty, simd }
        }
    }

    /// Whether the kernel reads 8-bit activations.
    pub fn int8(self) -> bool {
        matches!(self, Kernel::Int8 { .. })
    }

    /// Whether the kernel reads [`Activations::q8_halves`]: the SIMD 8-bit kernels of `Q6_K`,
    /// `Q3_K` and `Q2_K`.
    pub fn wants_half_sums(self) -> bool {
        matches!(self, Kernel::Int8 { ty, simd } if k_quant(ty) && simd.any())
    }

    /// Whether the kernel reads [`Activations::permuted`] and [`Activations::block_sums`].
    pub fn wants_permuted(self, packed: bool) -> bool {
        matches!(self, Kernel::F32 { ty, simd } if packed && simd.any() && lane_f32(ty))
    }

    /// The order and scaling of each 32-value block of [`Activations::permuted`], and the
    /// values per sum in [`Activations::block_sums`], for a kernel that
    /// [`wants_permuted`](Kernel::wants_permuted).
    pub fn permutation(self) -> ([usize; 32], [f32; 32], usize) {
        #[cfg(target_arch = "x86_64")]
        if let Kernel::F32 { ty, .. } = self
            && (k_quant(ty) || q5(ty))
        {
            // The values' own order; `Q6_K`'s `-32` offset (and `Q3_K`'s, `Q2_K`'s mins) acts
            // on sums per 16 values.
            let width = if k_quant(ty) { 16 } else { 32 };
            return (
                std::array::from_fn(|i| i),
                super::x86_shared::BYTE_SCALE,
                width,
            );
        }
        #[cfg(target_arch = "x86_64")]
        if let Kernel::F32 { simd, .. } = self
            && q4_in_lanes(simd)
        {
            // The AVX2 kernels' transposed words (`x86::Q4_LANE_ORDER`), which the AVX-512
            // one of a CPU that splits 512-bit operations reads too (`x86::q4_512`).
            return (super::x86::Q4_LANE_ORDER, super::x86::Q4_SCALE, 32);
        }
        // The AVX-512 kernels look the weights up as `d * q` and need no scaling.
        (Q4_ORDER, [1.0; 32], 32)
    }

    /// `x` (rows of whole blocks) in the order and scaling of this kernel's
    /// [`permutation`](Kernel::permutation), each value [`copies`](Kernel::copies) times:
    /// [`Activations::permuted`], written into `dst` (`x.len()` times the copies: every value
    /// of it).
    pub fn permute_into(self, x: &[f32], dst: &mut [f32]) {
        let (order, scale, _) = self.permutation();
        let copies = self.copies();
        assert_eq!(dst.len(), x.len() * copies, "permuted length");
        // The copies a constant where the kernels have them: a fill of a length known only
        // at run time is a masked loop per value (a quarter of a nine-row `Q4_1` product's
        // time at two threads on a Zen 4, `perf`), each thread making its own.
        match copies {
            1 => permute_copies::<1>(x, dst, &order, &scale),
            8 => permute_copies::<8>(x, dst, &order, &scale),
            _ => {
                for (b, dst) in x.chunks_exact(32).zip(dst.chunks_exact_mut(32 * copies)) {
                    for (k, dst) in dst.chunks_exact_mut(copies).enumerate() {
                        dst.fill(b[order[k]] * scale[k]);
                    }
                }
            }
        }
    }

    /// How many times [`Activations::permuted`] holds each value: eight for the AVX2 `f32`
    /// kernels of the packed types, which multiply a whole vector of one value (a load folded
    /// into the FMA; a broadcast costs a Zen 3 half a cycle of a vector pipe), else one.
    pub fn copies(self) -> usize {
        if self.rows_in_lanes() { 8 } else { 1 }
    }

    /// Whether this is an AVX2 `f32` kernel of a packed type (`x86::avx2::q4_1_f32`,
    /// `x86_q5::q5_f32`, `x86_q6::q6_f32`), which holds a group's eight rows in the lanes and
    /// multiplies them by one activation at a time.
    fn rows_in_lanes(self) -> bool {
        matches!(self, Kernel::F32 { ty, simd: Simd::Avx2 | Simd::Vnni } if lane_f32(ty))
    }

    /// `out[(r - start) * m + j] = row r . activation row j` for `r` in `start..end`
    /// (`start` a multiple of the group size for a packed matrix).
    pub fn rows(self, w: &Weights, acts: &Activations, start: usize, end: usize, out: &mut [f32]) {
        let m = acts.m;
        let mut r = start;
        if let Some(p) = w.packing {
            let group_bytes = p.group_bytes();
            let mut unpacked = Vec::new();
            let mut padded = Vec::new();
            // Every whole group of the range in one call (`start` begins a group), so the
            // kernel's choice and setup are made once per task, not once per group.
            debug_assert_eq!(r % GROUP, 0, "tasks start at a group");
            let (first, last) = (r / GROUP, end.min(p.grouped_rows) / GROUP);
            if last > first {
                let data = &w.data[first * group_bytes..last * group_bytes];
                let dst = &mut out[(r - start) * m..(last * GROUP - start) * m];
                if self.group(data, last - first, acts, dst) {
                    r = last * GROUP;
                }
            }
            while r < end.min(p.grouped_rows) {
                let g = r / GROUP;
                let data = &w.data[g * group_bytes..(g + 1) * group_bytes];
                // A `Q4_K` matrix's last group may be padded: its rows past `end` (zeros) are
                // computed into a buffer and dropped.
                let real = GROUP.min(end - r);
                let out = &mut out[(r - start) * m..(r - start + real) * m];
                let whole = real == GROUP;
                if !whole {
                    padded.resize(GROUP * m, 0.0);
                }
                let dst = if whole { &mut *out } else { &mut padded[..] };
                if self.group(data, 1, acts, dst) {
                    if !whole {
                        out.copy_from_slice(&padded[..real * m]);
                    }
                } else if iq4(w.ty) {
                    // No SIMD (so `f32` activations): each row dequantised from the packed
                    // form (which does not keep `IQ4_XS`'s fields), then dot products.
                    let cols = acts.cols;
                    let mut row = vec![0f32; cols];
                    for i in 0..real {
                        let mut scratch = Vec::new();
                        packed::dequantize_row(
                            w.ty,
                            Some(&p),
                            w.data,
                            0,
                            r + i,
                            &mut row,
                            &mut scratch,
                        );
                        for (j, o) in out[i * m..(i + 1) * m].iter_mut().enumerate() {
                            *o = scalar::dot_f32(&row, &acts.f32[j * cols..(j + 1) * cols]);
                        }
                    }
                } else {
                    // No SIMD: each row back in GGUF layout, then the portable kernels.
                    unpacked.resize(p.row_bytes(), 0);
                    for i in 0..real {
                        packed::unpack_row(w.ty, &p, w.data, r + i, &mut unpacked);
                        self.row(&unpacked, acts, &mut out[i * m..(i + 1) * m]);
                    }
                }
                r += real;
            }
        }
        if let Kernel::F32 { ty, simd } = self
            && super::grid::grid(ty)
            && super::grid::fused_f32(simd, m)
        {
            // A grid quant's few activation rows: each group decoded in registers and
            // multiplied there.
            let at = w.plain_row_at(r);
            let data = &w.data[at..at + (end - r) * w.row_bytes];
            let out = &mut out[(r - start) * m..(end - start) * m];
            super::grid::rows_f32(simd, ty, data, &acts.f32[..m * acts.cols], m, out);
            return;
        }
        if let Kernel::F32 { ty, simd } = self
            && !fused_f32(ty)
        {
            // Dequantise the rows of a tile once (aligned `F32` and `F16` rows are read in
            // place) and reuse them for every activation row.
            let mut buf = Vec::new();
            let cols = acts.cols;
            while r < end {
                let tile = dense_tile(simd, m).min(end - r);
                let at = w.plain_row_at(r);
                let bytes = &w.data[at..at + tile * w.row_bytes];
                let dense = match in_place(ty, simd, bytes) {
                    Some(dense) => dense,
                    None => {
                        buf.resize(tile * cols, 0.0);
                        if super::grid::grid(ty) {
                            super::grid::dequantize(simd, ty, bytes, &mut buf);
                        } else {
                            quant::dequantize(ty, bytes, &mut buf)
                                .expect("shape checked at construction");
                        }
                        Dense::F32(&buf[..])
                    }
                };
                let out = &mut out[(r - start) * m..(r - start + tile) * m];
                dot_rows(simd, dense, cols, &acts.f32[..m * cols], out);
                r += tile;
            }
        } else {
            for r in r..end {
                let at = w.plain_row_at(r);
                let row = &w.data[at..at + w.row_bytes];
                self.row(row, acts, &mut out[(r - start) * m..(r - start + 1) * m]);
            }
        }
    }

    /// One GGUF row of a `Q4_0`, `Q4_1` or `Q8_0` type times every activation row.
    fn row(self, row: &[u8], acts: &Activations, out: &mut [f32]) {
        let (cols, nb) = (acts.cols, acts.cols / 32);
        for (j, o) in out.iter_mut().enumerate() {
            *o = match self {
                Kernel::Int8 { ty, simd } => dot_q8(ty, simd, row, &acts.q8[j * nb..(j + 1) * nb]),
                Kernel::F32 { ty, simd } => {
                    dot_fused_f32(ty, simd, row, &acts.f32[j * cols..(j + 1) * cols])
                }
            };
        }
    }

    /// `groups` consecutive packed groups (`data`) times every activation row, `out[i * m + j]`
    /// for row `i` of the groups; false (nothing written) without SIMD.
    fn group(self, data: &[u8], groups: usize, acts: &Activations, out: &mut [f32]) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let (simd, ty) = match self {
                Kernel::Int8 { ty, simd } | Kernel::F32 { ty, simd } => (simd, ty),
            };
            if !simd.any() {
                return false;
            }
            if matches!(self, Kernel::F32 { .. })
                && simd == Simd::Avx512
                && super::x86_512::covers(ty)
                && !(q4(ty) && q4_in_lanes(simd))
            {
                let rows = (acts.f32, acts.permuted, acts.block_sums);
                // SAFETY: AVX-512 was detected (or is below what was), `data` holds `groups`
                // whole groups, and `acts` holds the rows its format reads.
                unsafe { super::x86_512::group(ty, data, groups, (acts.m, acts.cols), rows, out) };
                return true;
            }
            // Blocks of 32 values per row (a `Q4_K` super-block column holds eight).
            let (m, nb) = (acts.m, acts.cols / 32);
            // Even shares of at most `max_batch` rows (nine rows of the AVX-512 `f32` `Q4`
            // kernel as 3 + 3 + 3, not 4 + 4 + 1).
            let per_call = m.div_ceil(m.div_ceil(self.max_batch()));
            let mut j = 0;
            while j < m {
                let jn = (m - j).min(per_call);
                // SAFETY: `simd` was detected (or is below what was), `data` holds whole groups
                // of `nb` block columns, and every activation row holds `nb` blocks.
                unsafe {
                    match jn {
                        1 => self.group_jn::<1>(simd, ty, data, groups, nb, acts, (j, m), out),
                        2 => self.group_jn::<2>(simd, ty, data, groups, nb, acts, (j, m), out),
                        3 => self.group_jn::<3>(simd, ty, data, groups, nb, acts, (j, m), out),
                        4 => self.group_jn::<4>(simd, ty, data, groups, nb, acts, (j, m), out),
                        5 => self.group_jn::<5>(simd, ty, data, groups, nb, acts, (j, m), out),
                        6 => self.group_jn::<6>(simd, ty, data, groups, nb, acts, (j, m), out),
                        7 => self.group_jn::<7>(simd, ty, data, groups, nb, acts, (j, m), out),
                        _ => self.group_jn::<8>(simd, ty, data, groups, nb, acts, (j, m), out),
                    }
                }
                j += jn;
            }
            true
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (data, groups, acts, out);
            false
        }
    }

    /// How many activation rows the group kernel takes at once: eight, or for the `Q5` and
    /// `Q6_K` (`Q3_K`, `Q2_K`) kernels and the AVX2 `f32` `Q4` ones (rows in the lanes,
    /// several chains of partial sums a row) four (8-bit) or two (`f32`; four for the
    /// 16-lane AVX-512 `Q4` one, with its 32 registers).
    #[cfg(target_arch = "x86_64")]
    fn max_batch(self) -> usize {
        // Four chains of partial sums a row (`x86::avx2::q4_1_f32`): three or four rows at a
        // time spill (Zen 3, criterion `rows_q4_1_1536x576`, m = 3, 4 and 6: 1.0-1.4x slower).
        if self.rows_in_lanes() {
            return 2;
        }
        match self {
            Kernel::F32 { ty, .. } if iq4(ty) => 4,
            Kernel::Int8 { ty, .. } if k_quant(ty) || q5(ty) => 4,
            // Four chains a row: five rows spill (Zen 4, criterion `rows_q4_1_1536x576`: 5, 6
            // and 16 rows 114 / 148 / 391 us at most six a call, 120 / 136 / 348 at four).
            Kernel::F32 { ty, simd } if q4(ty) && q4_in_lanes(simd) => 4,
            Kernel::F32 { ty, .. } if k_quant(ty) || q5(ty) => 2,
            _ => MAX_JN,
        }
    }

    /// Activation rows `j0..j0 + JN` (of `m`) of [`Kernel::group`], each group's results to
    /// their places in `dst`.
    ///
    /// # Safety
    /// As there: `simd` runs on this CPU, `data` holds `groups` whole groups of `nb` block
    /// columns.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn group_jn<const JN: usize>(
        self,
        simd: Simd,
        ty: GgmlType,
        data: &[u8],
        groups: usize,
        nb: usize,
        acts: &Activations,
        (j0, m): (usize, usize),
        dst: &mut [f32],
    ) {
        use super::x86::{avx2, vnni};
        use super::x86_q5;
        let cols = acts.cols;
        // The activation rows' slices in the forms the kernel reads, made once for all the
        // groups (a form not prepared for this kernel is left alone).
        let int8 = matches!(self, Kernel::Int8 { .. });
        let permuted = !int8 && lane_f32(ty);
        let f32_rows: [&[f32]; JN] = row_slices(acts.f32, j0, cols, true);
        let xs: [&[f32]; JN] = row_slices(acts.permuted, j0, cols * self.copies(), permuted);
        // `Q6_K`'s (`Q3_K`'s, `Q2_K`'s) sums are per 16 values.
        let sums_width = if k_quant(ty) { 2 * nb } else { nb };
        let sums: [&[f32]; JN] = row_slices(acts.block_sums, j0, sums_width, permuted);
        let q8: [&[BlockQ8]; JN] = row_slices(acts.q8, j0, nb, int8);
        // The `Q5` and `Q6_K` (`Q3_K`, `Q2_K`) 8-bit kernels' per-block scales and sums.
        let q8_rows = |v: &[f32]| -> [*const f32; JN] {
            std::array::from_fn(|jj| {
                if int8 && (q5(ty) || k_quant(ty)) {
                    v[(j0 + jj) * nb..].as_ptr()
                } else {
                    std::ptr::null()
                }
            })
        };
        let ys = super::x86_shared::Q8Rows {
            blocks: q8,
            d: q8_rows(acts.q8_d),
            s: q8_rows(acts.q8_s),
        };
        let y6 = super::x86_q6::Q6Rows {
            blocks: q8,
            d: ys.d,
            s32: std::array::from_fn(|jj| {
                if int8 && k_quant(ty) {
                    acts.q8_halves[(j0 + jj) * 2 * nb..].as_ptr()
                } else {
                    std::ptr::null()
                }
            }),
        };
        let group_bytes = data.len() / groups.max(1);
        let mut first = 0;
        // (`Q3_K` and `Q2_K` run the 8-lane kernel.)
        let x16 = q5(ty) || ty == GgmlType::Q6_K || (q4(ty) && q4_in_lanes(simd));
        if matches!(self, Kernel::F32 { .. }) && simd == Simd::Avx512 && x16 {
            // Two groups at a time in 16-lane vectors, each lane with the 8-lane kernel's
            // arithmetic (a group left over runs that; for `Q4`, the 16-lane kernel with the
            // group as both halves).
            use super::columns::{Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K};
            use super::x86::q4_512::q4_f32_x16;
            while first + 2 <= groups || (q4(ty) && first < groups) {
                let w = data[first * group_bytes..].as_ptr();
                let mut res = [[0f32; 16]; JN];
                let out = &mut res;
                let gb = if first + 2 <= groups { group_bytes } else { 0 };
                // SAFETY: forwarded from the caller; groups `first` and `first + 1` exist
                // (or `gb` is zero).
                unsafe {
                    match ty {
                        GgmlType::Q4_0 => q4_f32_x16::<JN, Q4_0>(w, gb, nb, xs, sums, out),
                        GgmlType::Q4_1 => q4_f32_x16::<JN, Q4_1>(w, gb, nb, xs, sums, out),
                        GgmlType::Q4_K => q4_f32_x16::<JN, Q4_K>(w, gb, nb, xs, sums, out),
                        GgmlType::Q6_K => super::x86_q6::q6_f32_x16::<JN>(w, gb, nb, xs, sums, out),
                        GgmlType::Q5_0 => x86_q5::q5_f32_x16::<JN, Q5_0>(w, gb, nb, xs, sums, out),
                        GgmlType::Q5_1 => x86_q5::q5_f32_x16::<JN, Q5_1>(w, gb, nb, xs, sums, out),
                        _ => x86_q5::q5_f32_x16::<JN, Q5_K>(w, gb, nb, xs, sums, out),
                    }
                }
                let pair = if gb == 0 { 1 } else { 2 };
                for (jj, lanes) in res.iter().enumerate() {
                    for (s, &v) in lanes[..GROUP * pair].iter().enumerate() {
                        let row = GROUP * (first + s / GROUP) + packed::LANE_ROWS[s % GROUP];
                        dst[row * m + j0 + jj] = v;
                    }
                }
                first += pair;
            }
        }
        for g in first..groups {
            let w = data[g * group_bytes..].as_ptr();
            let mut res = [[0f32; 8]; JN];
            let out = &mut res;
            // SAFETY: forwarded from the caller.
            unsafe {
                match (self, simd) {
                    (Kernel::Int8 { .. }, _) if iq4(ty) => super::x86_iq4::iq4_q8(w, nb, q8, out),
                    (Kernel::F32 { .. }, _) if iq4(ty) => {
                        super::x86_iq4::iq4_f32(w, nb, f32_rows, out)
                    }
                    (Kernel::Int8 { .. }, _) if k_quant(ty) => {
                        use super::x86_q6::{Q2, Q3, Q6, q6_q8, q6_q8_avx512, q6_q8_vnni};
                        // The instance of each instruction set, for each form.
                        macro_rules! forms {
                            ($k:ident) => {
                                match ty {
                                    GgmlType::Q6_K => $k::<JN, _, Q6>(w, nb, &y6, out),
                                    GgmlType::Q3_K => $k::<JN, _, Q3>(w, nb, &y6, out),
                                    _ => $k::<JN, _, Q2>(w, nb, &y6, out),
                                }
                            };
                        }
                        match simd {
                            Simd::Avx512 => forms!(q6_q8_avx512),
                            Simd::Vnni => forms!(q6_q8_vnni),
                            _ => forms!(q6_q8),
                        }
                    }
                    (Kernel::F32 { .. }, _) if k_quant(ty) => {
                        use super::x86_q6::{Q2, Q3, Q6, q6_f32, q6_f32_avx512};
                        macro_rules! forms {
                            ($k:ident) => {
                                match ty {
                                    GgmlType::Q6_K => $k::<JN, Q6>(w, nb, xs, sums, out),
                                    GgmlType::Q3_K => $k::<JN, Q3>(w, nb, xs, sums, out),
                                    _ => $k::<JN, Q2>(w, nb, xs, sums, out),
                                }
                            };
                        }
                        match simd {
                            Simd::Avx512 => forms!(q6_f32_avx512),
                            _ => forms!(q6_f32),
                        }
                    }
                    (Kernel::Int8 { .. }, _) if q5(ty) => {
                        use super::columns::{Q5_0, Q5_1, Q5_K};
                        use x86_q5::{q5_q8, q5_q8_avx512, q5_q8_vnni};
                        match (ty, simd) {
                            (GgmlType::Q5_0, Simd::Avx512) => {
                                q5_q8_avx512::<JN, Q5_0, _>(w, nb, &ys, out)
                            }
                            (GgmlType::Q5_1, Simd::Avx512) => {
                                q5_q8_avx512::<JN, Q5_1, _>(w, nb, &ys, out)
                            }
                            (_, Simd::Avx512) => q5_q8_avx512::<JN, Q5_K, _>(w, nb, &ys, out),
                            (GgmlType::Q5_0, Simd::Vnni) => {
                                q5_q8_vnni::<JN, Q5_0, _>(w, nb, &ys, out)
                            }
                            (GgmlType::Q5_1, Simd::Vnni) => {
                                q5_q8_vnni::<JN, Q5_1, _>(w, nb, &ys, out)
                            }
                            (_, Simd::Vnni) => q5_q8_vnni::<JN, Q5_K, _>(w, nb, &ys, out),
                            (GgmlType::Q5_0, _) => q5_q8::<JN, Q5_0, _>(w, nb, &ys, out),
                            (GgmlType::Q5_1, _) => q5_q8::<JN, Q5_1, _>(w, nb, &ys, out),
                            (_, _) => q5_q8::<JN, Q5_K, _>(w, nb, &ys, out),
                        }
                    }
                    (Kernel::F32 { .. }, _) if q5(ty) => {
                        use super::columns::{Q5_0, Q5_1, Q5_K};
                        match (ty, simd) {
                            (GgmlType::Q5_0, Simd::Avx512) => {
                                x86_q5::q5_f32_avx512::<JN, Q5_0>(w, nb, xs, sums, out)
                            }
                            (GgmlType::Q5_1, Simd::Avx512) => {
                                x86_q5::q5_f32_avx512::<JN, Q5_1>(w, nb, xs, sums, out)
                            }
                            (_, Simd::Avx512) => {
                                x86_q5::q5_f32_avx512::<JN, Q5_K>(w, nb, xs, sums, out)
                            }
                            (GgmlType::Q5_0, _) => x86_q5::q5_f32::<JN, Q5_0>(w, nb, xs, sums, out),
                            (GgmlType::Q5_1, _) => x86_q5::q5_f32::<JN, Q5_1>(w, nb, xs, sums, out),
                            _ => x86_q5::q5_f32::<JN, Q5_K>(w, nb, xs, sums, out),
                        }
                    }
                    (Kernel::Int8 { .. }, _) => {
                        use super::columns::{Q4_0, Q4_1, Q4_K};
                        use super::x86_q8_512;
                        // The same four kernels of each instance.
                        macro_rules! int8 {
                            ($m:ident) => {
                                match ty {
                                    GgmlType::Q4_1 => $m::q4_1_q8::<JN, Q4_1>(w, nb, q8, out),
                                    GgmlType::Q4_0 => $m::q4_1_q8::<JN, Q4_0>(w, nb, q8, out),
                                    GgmlType::Q4_K => $m::q4_1_q8::<JN, Q4_K>(w, nb, q8, out),
                                    _ => $m::q8_0_q8(w, nb, q8, out),
                                }
                            };
                        }
                        match simd {
                            Simd::Avx512 => int8!(x86_q8_512),
                            Simd::Vnni => int8!(vnni),
                            _ => int8!(avx2),
                        }
                    }
                    (Kernel::F32 { .. }, _)
                        if matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K) =>
                    {
                        use super::columns::{Q4_0, Q4_1, Q4_K};
                        match (simd, ty) {
                            (Simd::Vnni, GgmlType::Q4_1) => {
                                vnni::q4_1_f32::<JN, Q4_1>(w, nb, xs, sums, out)
                            }
                            (Simd::Vnni, GgmlType::Q4_0) => {
                                vnni::q4_1_f32::<JN, Q4_0>(w, nb, xs, sums, out)
                            }
                            (Simd::Vnni, _) => vnni::q4_1_f32::<JN, Q4_K>(w, nb, xs, sums, out),
                            (_, GgmlType::Q4_1) => avx2::q4_1_f32::<JN, Q4_1>(w, nb, xs, sums, out),
                            (_, GgmlType::Q4_0) => avx2::q4_1_f32::<JN, Q4_0>(w, nb, xs, sums, out),
                            (_, _) => avx2::q4_1_f32::<JN, Q4_K>(w, nb, xs, sums, out),
                        }
                    }
                    _ => match simd {
                        Simd::Vnni => vnni::q8_0_f32(w, nb, f32_rows, out),
                        _ => avx2::q8_0_f32(w, nb, f32_rows, out),
                    },
                }
            }
            for (jj, lanes) in res.iter().enumerate() {
                for (s, &v) in lanes.iter().enumerate() {
                    dst[(GROUP * g + packed::LANE_ROWS[s]) * m + j0 + jj] = v;
                }
            }
        }
    }
}

/// Rows `j0..j0 + JN` of `v` (`width` values each), or empty slices where `v` is not read
/// (`read` false: it may not be prepared).
#[cfg(target_arch = "x86_64")]
fn row_slices<T, const JN: usize>(v: &[T], j0: usize, width: usize, read: bool) -> [&[T]; JN] {
    std::array::from_fn(|jj| match read {
        true => &v[(j0 + jj) * width..(j0 + jj + 1) * width],
        false => &[],
    })
}

/// Whether `ty` is `Q6_K`, `Q3_K` or `Q2_K` (packed in a form of their own, a scale per 16
/// values; SIMD group kernels in `x86_q6.rs`; `Q4_K` and `Q5_K` are packed and run the
/// `Q4_1` and `Q5` group kernels).
fn k_quant(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q6_K | GgmlType::Q3_K | GgmlType::Q2_K)
}

/// Whether `ty`'s `f32` SIMD group kernels take [`Activations::permuted`] and
/// [`Activations::block_sums`] (the rows in the lanes, or in AVX-512's own forms): `Q4_0`,
/// `Q4_1`, `Q4_K` (`x86.rs`), the [`q5`] types and the [`k_quant`] ones.
fn lane_f32(ty: GgmlType) -> bool {
    q4(ty) || q5(ty) || k_quant(ty)
}

/// [`Kernel::permute_into`] with `N` copies of each value: block `b`'s value `k` is
/// `b[order[k]] * scale[k]`, `N` times.
fn permute_copies<const N: usize>(
    x: &[f32],
    dst: &mut [f32],
    order: &[usize; 32],
    scale: &[f32; 32],
) {
    for (b, dst) in x.chunks_exact(32).zip(dst.chunks_exact_mut(32 * N)) {
        let b: &[f32; 32] = b.try_into().expect("a block of 32");
        for (k, dst) in dst.chunks_exact_mut(N).enumerate() {
            let v = b[order[k] % 32] * scale[k];
            for d in dst {
                *d = v;
            }
        }
    }
}

/// Whether the `f32` `Q4` kernels of `simd` hold a group's rows in the lanes: AVX2 always;
/// AVX-512 where the CPU runs 512-bit operations in halves (`x86::q4_512`; elsewhere
/// `x86_512`'s look-up kernels).
#[cfg(target_arch = "x86_64")]
fn q4_in_lanes(simd: Simd) -> bool {
    simd != Simd::Avx512 || super::simd::avx512_in_halves()
}

/// Whether `ty` is `Q4_0`, `Q4_1` or `Q4_K` (packed as `Q4_1` groups).
fn q4(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K)
}

/// Whether `ty` is `Q5_0`, `Q5_1` or `Q5_K` (packed; SIMD group kernels in `x86_q5.rs`).
fn q5(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5_K)
}

/// Whether `ty` is `IQ4_NL` or `IQ4_XS` (packed in the form of `packed_iq4.rs`; SIMD group
/// kernels in `x86_iq4.rs`).
fn iq4(ty: GgmlType) -> bool {
    super::packed_iq4::iq4(ty)
}

/// Whether `ty` has a fused dequantise-and-multiply `f32` kernel.
fn fused_f32(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0)
}

/// One weight row (whole blocks of `ty`) times one quantized activation row.
#[inline]
fn dot_q8(ty: GgmlType, simd: Simd, row: &[u8], y: &[BlockQ8]) -> f32 {
    if super::grid::grid(ty) {
        return super::grid::dot_q8(simd, ty, row, y);
    }
    if iq4(ty) {
        // The `rows % 8` rows left outside the packed groups.
        return scalar::dot_iq4_q8(ty, row, y);
    }
    #[cfg(target_arch = "x86_64")]
    if simd.any() && !q5(ty) {
        // SAFETY: a SIMD level is only chosen when AVX2, FMA and F16C were detected.
        unsafe {
            return match ty {
                GgmlType::Q4_0 => super::x86::dot_q4_0_q8(row, y),
                GgmlType::Q4_1 => super::x86::dot_q4_1_q8(row, y),
                _ => super::x86::dot_q8_0_q8(row, y),
            };
        }
    }
    let _ = simd;
    // Q5 rows met here are the `rows % 8` left outside the packed groups (or no SIMD).
    match ty {
        GgmlType::Q4_0 => scalar::dot_q4_0_q8(row, y),
        GgmlType::Q4_1 => scalar::dot_q4_1_q8(row, y),
        GgmlType::Q5_0 => scalar::dot_q5_q8::<false>(row, y),
        GgmlType::Q5_1 => scalar::dot_q5_q8::<true>(row, y),
        _ => scalar::dot_q8_0_q8(row, y),
    }
}

/// One weight row of a [`fused_f32`] type times an `f32` activation row.
#[inline]
fn dot_fused_f32(ty: GgmlType, simd: Simd, row: &[u8], x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd.any() && fused_f32(ty) {
        // SAFETY: a SIMD level is only chosen when AVX2, FMA and F16C were detected.
        unsafe {
            return match ty {
                GgmlType::Q4_0 => super::x86::dot_q4_0_f32(row, x),
                GgmlType::Q4_1 => super::x86::dot_q4_1_f32(row, x),
                _ => super::x86::dot_q8_0_f32(row, x),
            };
        }
    }
    let _ = simd;
    scalar::dot_blocks_f32(ty, row, x)
}
