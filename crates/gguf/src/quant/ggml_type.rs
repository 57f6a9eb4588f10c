//! The GGML tensor element types and their block geometry.

/// A GGML tensor element type, as stored in a GGUF tensor info (`ggml_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE half float.
    F16,
    /// 32 values: `f16` scale, 4-bit quants.
    Q4_0,
    /// 32 values: `f16` scale and min, 4-bit quants.
    Q4_1,
    /// 32 values: `f16` scale, 5-bit quants.
    Q5_0,
    /// 32 values: `f16` scale and min, 5-bit quants.
    Q5_1,
    /// 32 values: `f16` scale, 8-bit quants.
    Q8_0,
    /// 32 values: `f16` scale and sum, 8-bit quants.
    Q8_1,
    /// 256-value K-quant, 2-bit.
    Q2_K,
    /// 256-value K-quant, 3-bit.
    Q3_K,
    /// 256-value K-quant, 4-bit with 6-bit sub-block scales and mins.
    Q4_K,
    /// 256-value K-quant, 5-bit with 6-bit sub-block scales and mins.
    Q5_K,
    /// 256-value K-quant, 6-bit with 8-bit sub-block scales.
    Q6_K,
    /// 256-value K-quant, 8-bit (intermediate type for dot products).
    Q8_K,
    /// 8-bit signed integer.
    I8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 64-bit IEEE float.
    F64,
    /// bfloat16: the top 16 bits of an `f32`.
    BF16,
    /// 32 values: `f16` scale, 4-bit indices into a fixed non-linear table of 16 levels.
    IQ4_NL,
    /// 256 values: `f16` scale, 6-bit scales per 32 values, 4-bit indices into the table of
    /// `IQ4_NL`.
    IQ4_XS,
    /// 256 values, 2.06 bits each: 8-bit indices into a grid of eight-value points, sign bits,
    /// a 4-bit scale per 32 values.
    IQ2_XXS,
    /// 256 values, 2.31 bits each: 9-bit indices into a grid of eight-value points, sign bits,
    /// a 4-bit scale per 16 values.
    IQ2_XS,
    /// 256 values, 2.56 bits each: 10-bit indices into a grid of eight-value points, a sign bit
    /// a value, a 4-bit scale per 16 values.
    IQ2_S,
    /// 256 values, 3.06 bits each: 8-bit indices into a grid of four-value points, sign bits,
    /// a 4-bit scale per 32 values.
    IQ3_XXS,
    /// 256 values, 3.44 bits each: 9-bit indices into a grid of four-value points, a sign bit
    /// a value, a 4-bit scale per 32 values.
    IQ3_S,
    /// 256 values, 1.56 bits each: 11-bit indices into a grid of eight ternary values, a shift
    /// and a 3-bit scale per 32 values.
    IQ1_S,
    /// 256 values, 1.75 bits each: 11-bit indices into `IQ1_S`'s grid, a shift per eight
    /// values, a 3-bit scale per 16.
    IQ1_M,
}

impl GgmlType {
    /// The type for a GGUF `ggml_type` id, or `None` for an id kindle does not know.
    pub fn from_id(id: u32) -> Option<Self> {
        use GgmlType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            16 => IQ2_XXS,
            17 => IQ2_XS,
            18 => IQ3_XXS,
            19 => IQ1_S,
            20 => IQ4_NL,
            21 => IQ3_S,
            22 => IQ2_S,
            23 => IQ4_XS,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => IQ1_M,
            30 => BF16,
            _ => return None,
        })
    }

    /// The GGUF `ggml_type` id of this type.
    pub fn id(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2_K => 10,
            Q3_K => 11,
            Q4_K => 12,
            Q5_K => 13,
            Q6_K => 14,
            Q8_K => 15,
            IQ2_XXS => 16,
            IQ2_XS => 17,
            IQ3_XXS => 18,
            IQ1_S => 19,
            IQ4_NL => 20,
            IQ3_S => 21,
            IQ2_S => 22,
            IQ4_XS => 23,
            IQ1_M => 29,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            BF16 => 30,
        }
    }

    /// Number of values in one block (1 for plain types).
    pub fn block_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | I8 | I16 | I32 | I64 | F64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4_NL => 32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K | IQ4_XS => 256,
            IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M => 256,
        }
    }

    /// Number of bytes one block occupies.
    pub fn type_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | I32 => 4,
            F16 | BF16 | I16 => 2,
            I8 => 1,
            I64 | F64 => 8,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
            IQ4_NL => 18,
            IQ4_XS => 136,
            IQ2_XXS => 66,
            IQ2_XS => 74,
            IQ2_S => 82,
            IQ3_XXS => 98,
            IQ3_S => 110,
            IQ1_S => 50,
            IQ1_M => 56,
        }
    }

    /// Whether [`dequantize`](super::dequantize) can turn this type into `f32` values.
    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16
                | BF16
                | Q4_0
                | Q4_1
                | Q5_0
                | Q5_1
                | Q8_0
                | Q2_K
                | Q3_K
                | Q4_K
                | Q5_K
                | Q6_K
                | IQ4_NL
                | IQ4_XS
                | IQ2_XXS
                | IQ2_XS
                | IQ2_S
                | IQ3_XXS
                | IQ3_S
                | IQ1_S
                | IQ1_M
        )
    }

    /// The name GGML uses for this type (`"Q4_K"`, `"F16"`, ...).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            BF16 => "BF16",
            IQ4_NL => "IQ4_NL",
            IQ4_XS => "IQ4_XS",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ2_S => "IQ2_S",
            IQ3_XXS => "IQ3_XXS",
            IQ3_S => "IQ3_S",
            IQ1_S => "IQ1_S",
            IQ1_M => "IQ1_M",
        }
    }
}

/// ggml's name for a type id kindle does not read (the other importance-matrix quants, the
/// ternary and FP4 ones, and the retired ids), for error messages; `None` for an id ggml does
/// not define either.
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        4 | 5 => "Q4_2/Q4_3, retired by ggml",
        31..=33 => "Q4_0_4_4/Q4_0_4_8/Q4_0_8_8, retired by ggml: requantize the file",
        34 => "TQ1_0",
        35 => "TQ2_0",
        36..=38 => "IQ4_NL_4_4/IQ4_NL_4_8/IQ4_NL_8_8, retired by ggml: requantize the file",
        39 => "MXFP4",
        40 => "NVFP4",
        41 => "Q1_0",
        42 => "Q2_0",
        _ => return GgmlType::from_id(id).map(GgmlType::name),
    })
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
