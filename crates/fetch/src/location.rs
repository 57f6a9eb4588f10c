//! Where models are found: the environment variables and the rules that read them.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::{CACHE_ENV, DEFAULT_FILE_NAME, MODEL_ENV, SKIP_REAL_MODEL_ENV};

/// The environment variables that decide where models are found, as values, so that the rules
/// can be applied (and tested) without touching the process environment. An empty value
/// counts as unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelEnv {
    /// `$KINDLE_MODEL`: a model file that tests use instead of the default model.
    pub kindle_model: Option<OsString>,
    /// `$KINDLE_CACHE_DIR`: the cache folder itself.
    pub kindle_cache_dir: Option<OsString>,
    /// `$XDG_CACHE_HOME`: the cache folder is `kindle/models` inside it.
    pub xdg_cache_home: Option<OsString>,
    /// `$HOME`: the cache folder is `.cache/kindle/models` inside it.
    pub home: Option<OsString>,
    /// `$KINDLE_SKIP_REAL_MODEL`: `1` makes tests that need the real model skip.
    pub skip_real_model: Option<OsString>,
}

impl ModelEnv {
    /// The variables as this process sees them.
    pub fn from_process() -> Self {
        ModelEnv {
            kindle_model: std::env::var_os(MODEL_ENV),
            kindle_cache_dir: std::env::var_os(CACHE_ENV),
            xdg_cache_home: std::env::var_os("XDG_CACHE_HOME"),
            home: std::env::var_os("HOME"),
            skip_real_model: std::env::var_os(SKIP_REAL_MODEL_ENV),
        }
    }

    /// The folder models are cached in: `$KINDLE_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/kindle/models`, else `$HOME/.cache/kindle/models` (`./.cache/...`
    /// without a home).
    pub fn cache_dir(&self) -> PathBuf {
        self.cache_dir_and_rule().0
    }

    /// [`cache_dir`](Self::cache_dir) and, in words, the rule that chose it (for messages).
    pub fn cache_dir_and_rule(&self) -> (PathBuf, &'static str) {
        if let Some(dir) = set(&self.kindle_cache_dir) {
            return (PathBuf::from(dir), "$KINDLE_CACHE_DIR");
        }
        if let Some(dir) = set(&self.xdg_cache_home) {
            let dir = PathBuf::from(dir).join("kindle").join("models");
            return (dir, "$XDG_CACHE_HOME/kindle/models");
        }
        match set(&self.home) {
            Some(home) => (
                PathBuf::from(home)
                    .join(".cache")
                    .join("kindle")
                    .join("models"),
                "~/.cache/kindle/models",
            ),
            None => (
                PathBuf::from(".")
                    .join(".cache")
                    .join("kindle")
                    .join("models"),
                "./.cache/kindle/models ($HOME is not set)",
            ),
        }
    }

    /// Where the default model lives in [`cache_dir`](Self::cache_dir).
    pub fn default_model_path(&self) -> PathBuf {
        self.cache_dir().join(DEFAULT_FILE_NAME)
    }

    /// `$KINDLE_MODEL` as a path, when set.
    pub fn model_override(&self) -> Option<PathBuf> {
        set(&self.kindle_model).map(PathBuf::from)
    }

    /// Whether `$KINDLE_SKIP_REAL_MODEL` is `1`.
    pub fn skips_real_model(&self) -> bool {
        self.skip_real_model.as_deref() == Some("1".as_ref())
    }
}

fn set(value: &Option<OsString>) -> Option<&OsString> {
    value.as_ref().filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn env(cache: Option<&str>, xdg: Option<&str>, home: Option<&str>) -> ModelEnv {
        ModelEnv {
            kindle_cache_dir: cache.map(OsString::from),
            xdg_cache_home: xdg.map(OsString::from),
            home: home.map(OsString::from),
            ..ModelEnv::default()
        }
    }

    #[test]
    fn kindle_cache_dir_comes_first() {
        let env = env(Some("/k"), Some("/x"), Some("/h"));
        assert_eq!(
            env.cache_dir_and_rule(),
            (PathBuf::from("/k"), "$KINDLE_CACHE_DIR")
        );
        assert_eq!(
            env.default_model_path(),
            Path::new("/k").join(DEFAULT_FILE_NAME)
        );
    }

    #[test]
    fn xdg_cache_home_comes_second() {
        assert_eq!(
            env(None, Some("/x"), Some("/h")).cache_dir(),
            Path::new("/x/kindle/models")
        );
        // An empty variable counts as unset.
        assert_eq!(
            env(Some(""), Some("/x"), Some("/h")).cache_dir(),
            Path::new("/x/kindle/models")
        );
    }

    #[test]
    fn home_comes_last() {
        assert_eq!(
            env(None, None, Some("/h")).cache_dir(),
            Path::new("/h/.cache/kindle/models")
        );
        assert_eq!(
            env(None, Some(""), Some("/h")).cache_dir(),
            Path::new("/h/.cache/kindle/models")
        );
        assert_eq!(
            env(None, None, None).cache_dir(),
            Path::new("./.cache/kindle/models")
        );
    }

    #[test]
    fn model_override_and_skip() {
        let mut env = ModelEnv::default();
        assert_eq!(env.model_override(), None);
        assert!(!env.skips_real_model());
        env.kindle_model = Some("".into());
        assert_eq!(env.model_override(), None);
        env.kindle_model = Some("/m.gguf".into());
        assert_eq!(env.model_override(), Some(PathBuf::from("/m.gguf")));
        env.skip_real_model = Some("0".into());
        assert!(!env.skips_real_model());
        env.skip_real_model = Some("1".into());
        assert!(env.skips_real_model());
    }
}
