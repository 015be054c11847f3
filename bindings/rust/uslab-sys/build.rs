//! Builds the uslab C library from source with the `cc` crate, the way
//! uslab's CMakeLists.txt builds libuslab.a: every `src/**/*.c` except
//! `src/override.c` (the C library's names belong to libuslab-malloc, not to
//! a library that lives beside the program's malloc), with the same code
//! generation flags. No network, no installed uslab, no CMake needed.
//!
//! Where the sources come from, first found wins:
//! 1. `$USLAB_SYS_SOURCE_DIR` (a uslab source tree: `include/uslab.h`, `src/`);
//! 2. `csrc/` in this crate: the copy `../package.sh` puts there before
//!    `cargo package`, which is what a packaged crate builds from;
//! 3. `../../..`: the uslab repository this crate lives in.
//!
//! The directory is globbed rather than listed, so that new C files are
//! picked up as they appear. The header is also read to generate the stat
//! item constants, the version, and the list of API functions (see
//! `src/lib.rs`).

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

fn is_uslab_tree(dir: &Path) -> bool {
    dir.join("include/uslab.h").is_file() && dir.join("src").is_dir()
}

fn locate_sources(manifest_dir: &Path) -> PathBuf {
    println!("cargo:rerun-if-env-changed=USLAB_SYS_SOURCE_DIR");
    if let Some(dir) = env::var_os("USLAB_SYS_SOURCE_DIR") {
        let dir = PathBuf::from(dir);
        if !is_uslab_tree(&dir) {
            panic!(
                "USLAB_SYS_SOURCE_DIR={} is not a uslab source tree (include/uslab.h, src/)",
                dir.display()
            );
        }
        return dir;
    }
    println!("cargo:rerun-if-env-changed=USLAB_SYS_VENDORING");
    let vendored = manifest_dir.join("csrc");
    let repository = manifest_dir.join("../../..");
    if is_uslab_tree(&vendored) {
        // ../package.sh sets USLAB_SYS_VENDORING while the copy is meant.
        if is_uslab_tree(&repository) && env::var_os("USLAB_SYS_VENDORING").is_none() {
            // A copy left behind by an interrupted ../package.sh would hide
            // the live sources; say so rather than build stale code quietly.
            println!(
                "cargo:warning=uslab-sys: building from the vendored copy {} although the \
                 repository's sources are at {}; delete csrc/ to use them",
                vendored.display(),
                repository.display()
            );
        }
        return vendored;
    }
    if is_uslab_tree(&repository) {
        return repository;
    }
    panic!(
        "uslab-sys: no uslab C sources: neither {} nor {} holds include/uslab.h and src/ \
         (set USLAB_SYS_SOURCE_DIR, or run bindings/rust/package.sh to vendor them)",
        vendored.display(),
        repository.display()
    );
}

/// The layer folders of `src/` (core, cpu, malloc, debug, observe): each
/// holds C files and the headers its sources include by name.
fn source_dirs(src: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(src)
        .unwrap_or_else(|e| panic!("uslab-sys: cannot read {}: {}", src.display(), e))
        .map(|entry| entry.expect("uslab-sys: reading the source directory").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The C files of libuslab: `src/**/*.c` but `override.c`, sorted for a
/// reproducible archive.
fn library_sources(src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in std::iter::once(src.to_path_buf()).chain(source_dirs(src)) {
        files.extend(
            fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("uslab-sys: cannot read {}: {}", dir.display(), e))
                .map(|entry| entry.expect("uslab-sys: reading the source directory").path())
                .filter(|p| p.extension().map_or(false, |e| e == "c"))
                .filter(|p| p.file_name().map_or(false, |n| n != "override.c")),
        );
    }
    files.sort();
    assert!(!files.is_empty(), "uslab-sys: no C files in {}", src.display());
    files
}

/// What the bindings take from include/uslab.h.
struct Header {
    version: [u32; 3],
    stat_items: Vec<(String, String)>,
    functions: Vec<String>,
    /// `USLAB_CACHE_INFO_VERSION`.
    cache_info_version: u32,
    /// `USLAB_STAT_EVENTS_MAX` (the events[] length from struct version 3 on).
    stat_events_max: Option<usize>,
    /// `USLAB_PROCESS_INFO_VERSION`.
    process_info_version: u32,
    /// The per-CPU modes: one more than the largest `USLAB_CPU_*` value (0
    /// before the `cpu_mode` tunable).
    cpu_modes: u32,
}

/// The value of `#define NAME <number>` in the header, if any.
fn define_number(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next() == Some("#define") && words.next() == Some(name) {
            words.next().and_then(|w| w.parse().ok())
        } else {
            None
        }
    })
}

fn parse_header(text: &str) -> Header {
    let mut version = [None; 3];
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#define") {
            continue;
        }
        let slot = match words.next() {
            Some("USLAB_VERSION_MAJOR") => 0,
            Some("USLAB_VERSION_MINOR") => 1,
            Some("USLAB_VERSION_PATCH") => 2,
            _ => continue,
        };
        version[slot] = words.next().and_then(|w| w.parse::<u32>().ok());
    }
    let version = match version {
        [Some(a), Some(b), Some(c)] => [a, b, c],
        _ => panic!("uslab-sys: uslab.h lacks USLAB_VERSION_MAJOR/MINOR/PATCH"),
    };

    // USLAB_STAT_ITEMS(X): one X(NAME, "description") per line, continued
    // with backslashes.
    let mut stat_items = Vec::new();
    let start = text
        .find("#define USLAB_STAT_ITEMS(X)")
        .expect("uslab-sys: uslab.h lacks the USLAB_STAT_ITEMS(X) list");
    for line in text[start..].lines().skip(1) {
        let item = line.trim();
        if let Some(rest) = item.strip_prefix("X(") {
            let comma = rest.find(',').expect("uslab-sys: X(NAME, \"desc\") in USLAB_STAT_ITEMS");
            let name = rest[..comma].trim().to_string();
            let desc = rest[comma + 1..]
                .split('"')
                .nth(1)
                .expect("uslab-sys: a quoted description in USLAB_STAT_ITEMS")
                .to_string();
            stat_items.push((name, desc));
        }
        if !item.ends_with('\\') {
            break;
        }
    }
    assert!(!stat_items.is_empty(), "uslab-sys: empty USLAB_STAT_ITEMS list");

    // Every `USLAB_API ... uslab_name(`: the functions src/lib.rs must declare.
    let mut functions = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("USLAB_API ")) {
        let paren = line.find('(').expect("uslab-sys: USLAB_API declaration without (");
        let name: String = line[..paren]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        functions.push(name);
    }
    let cache_info_version = define_number(text, "USLAB_CACHE_INFO_VERSION")
        .expect("uslab-sys: uslab.h lacks USLAB_CACHE_INFO_VERSION") as u32;
    let stat_events_max = define_number(text, "USLAB_STAT_EVENTS_MAX").map(|v| v as usize);
    let process_info_version = define_number(text, "USLAB_PROCESS_INFO_VERSION")
        .expect("uslab-sys: uslab.h lacks USLAB_PROCESS_INFO_VERSION") as u32;
    // Modes are added without a struct version (slab mode was), so count
    // the header's `#define USLAB_CPU_NAME <n>` lines.
    let cpu_modes = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            if words.next() != Some("#define") || !words.next()?.starts_with("USLAB_CPU_") {
                return None;
            }
            words.next()?.parse::<u32>().ok()
        })
        .max()
        .map_or(0, |m| m + 1);
    Header {
        version,
        stat_items,
        functions,
        cache_info_version,
        stat_events_max,
        process_info_version,
        cpu_modes,
    }
}

/// The newest struct uslab_cache_info version src/lib.rs can mirror.
const NEWEST_MIRRORED: u32 = 5;

/// The struct uslab_cache_info version src/lib.rs mirrors for this header:
/// the header's own up to [`NEWEST_MIRRORED`] (5: cfg uslab_cache_info_v5,
/// v4 and v3; 4: uslab_cache_info_v4 and v3; 3: uslab_cache_info_v3), else
/// 2. A newer header is mirrored as 5, which the library still fills for a
/// caller that asks for it. Returns (version, events[] length).
fn mirrored_cache_info(header: &Header) -> (u32, usize) {
    if header.cache_info_version >= 3 {
        let max = header
            .stat_events_max
            .expect("uslab-sys: uslab.h has struct uslab_cache_info version 3 but no USLAB_STAT_EVENTS_MAX");
        (header.cache_info_version.min(NEWEST_MIRRORED), max)
    } else {
        // Versions 1 and 2: events[] has one entry per stat item.
        (2, header.stat_items.len())
    }
}

/// rustc's minor version (1.x), from `$RUSTC --version`.
fn rustc_minor() -> Option<u32> {
    let rustc = env::var_os("RUSTC")?;
    let out = std::process::Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace().nth(1)?.split('.').nth(1)?.parse().ok()
}

fn generate_rust(header: &Header) -> String {
    let mut out = String::new();
    let [major, minor, patch] = header.version;
    writeln!(out, "/// `USLAB_VERSION_MAJOR` of the compiled header.").unwrap();
    writeln!(out, "pub const USLAB_VERSION_MAJOR: c_int = {};", major).unwrap();
    writeln!(out, "/// `USLAB_VERSION_MINOR` of the compiled header.").unwrap();
    writeln!(out, "pub const USLAB_VERSION_MINOR: c_int = {};", minor).unwrap();
    writeln!(out, "/// `USLAB_VERSION_PATCH` of the compiled header.").unwrap();
    writeln!(out, "pub const USLAB_VERSION_PATCH: c_int = {};", patch).unwrap();
    writeln!(
        out,
        "/// `USLAB_VERSION`: MAJOR * 10000 + MINOR * 100 + PATCH, as `uslab_version()` returns it."
    )
    .unwrap();
    writeln!(out, "pub const USLAB_VERSION: c_int = {};", major * 10000 + minor * 100 + patch).unwrap();
    writeln!(out, "/// `USLAB_VERSION_STRING`.").unwrap();
    writeln!(out, "pub const USLAB_VERSION_STRING: &str = \"{}.{}.{}\";", major, minor, patch).unwrap();
    for (i, (name, desc)) in header.stat_items.iter().enumerate() {
        writeln!(out, "/// {}.", desc.replace('\\', "\\\\")).unwrap();
        writeln!(out, "pub const USLAB_STAT_{}: uslab_stat_item = {};", name, i).unwrap();
    }
    writeln!(out, "/// Number of stat items this uslab counts.").unwrap();
    writeln!(out, "pub const USLAB_NR_STAT_ITEMS: usize = {};", header.stat_items.len()).unwrap();
    let (info_version, info_events) = mirrored_cache_info(header);
    writeln!(out, "/// The [`uslab_cache_info`] version these bindings mirror (and ask the library for).").unwrap();
    writeln!(out, "pub const USLAB_CACHE_INFO_VERSION: c_uint = {};", info_version).unwrap();
    writeln!(out, "/// The length of [`uslab_cache_info::events`] in that version.").unwrap();
    writeln!(out, "pub const USLAB_CACHE_INFO_EVENTS: usize = {};", info_events).unwrap();
    writeln!(
        out,
        "/// The per-CPU modes this uslab has: the `cpu_mode` tunable takes the `USLAB_CPU_*` values \
         below this (0: a uslab before the tunable). Counted from the header; not a C constant."
    )
    .unwrap();
    writeln!(out, "pub const USLAB_CPU_NR_MODES: c_uint = {};", header.cpu_modes).unwrap();
    writeln!(out, "/// Every function `uslab.h` declares (`USLAB_API`), for the bindings' own tests.").unwrap();
    writeln!(out, "#[doc(hidden)]").unwrap();
    writeln!(out, "pub const API_FUNCTIONS: &[&str] = &[").unwrap();
    for f in &header.functions {
        writeln!(out, "    \"{}\",", f).unwrap();
    }
    writeln!(out, "];").unwrap();
    out
}

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        panic!("uslab-sys: uslab runs on Linux only (mmap, madvise, initial-exec TLS, /proc)");
    }

    let root = locate_sources(&manifest_dir);
    let src = root.join("src");
    let include = root.join("include");
    println!("cargo:rerun-if-changed={}", src.display());
    for dir in source_dirs(&src) {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    println!("cargo:rerun-if-changed={}", include.display());
    println!("cargo:rerun-if-changed=c");

    let header_path = include.join("uslab.h");
    let header_text = fs::read_to_string(&header_path)
        .unwrap_or_else(|e| panic!("uslab-sys: cannot read {}: {}", header_path.display(), e));
    let header = parse_header(&header_text);
    fs::write(out_dir.join("generated.rs"), generate_rust(&header)).expect("writing generated.rs");
    // struct uslab_cache_info grew sheaf fields in version 3, the CPU
    // mode and totals in version 4, slab mode's tunables in version 5:
    // src/lib.rs mirrors each version's fields under its cfg (v5 sets v4
    // and v3 too). (Declared for rustc's
    // check-cfg, which Rust 1.80 introduced; older Cargo would warn about
    // the key.)
    let mirrored = mirrored_cache_info(&header).0;
    let check_cfg = rustc_minor().map_or(false, |m| m >= 80);
    for (cfg, since) in [("uslab_cache_info_v3", 3), ("uslab_cache_info_v4", 4), ("uslab_cache_info_v5", 5)] {
        if check_cfg {
            println!("cargo:rustc-check-cfg=cfg({})", cfg);
        }
        if mirrored >= since {
            println!("cargo:rustc-cfg={}", cfg);
        }
    }
    // struct uslab_process_info: version 2 is always mirrored, version 3's
    // fields (KFENCE by time) where the header has them, so that an older
    // source tree (USLAB_SYS_SOURCE_DIR) still builds and passes.
    if check_cfg {
        println!("cargo:rustc-check-cfg=cfg(uslab_process_info_v3)");
    }
    if header.process_info_version >= 3 {
        println!("cargo:rustc-cfg=uslab_process_info_v3");
    }

    // CMakeLists.txt: C11 with GNU extensions, -O2 -g, -Wall -Wextra
    // -Wno-unused-parameter, -fvisibility=hidden -fno-plt
    // -ftls-model=initial-exec, position-independent code. The library is
    // optimised in every Cargo profile: its fast paths are the point, and
    // its stress paths would crawl at -O0.
    let mut build = cc::Build::new();
    build
        .files(library_sources(&src))
        .file("c/layout.c")
        .include(&include)
        .include(&src)
        .includes(source_dirs(&src))
        .opt_level(2)
        .pic(true)
        .warnings(true)
        .extra_warnings(true)
        .flag("-std=gnu11")
        .flag("-Wno-unused-parameter")
        .flag("-fvisibility=hidden")
        .flag("-ftls-model=initial-exec")
        .flag_if_supported("-fno-plt");
    build.compile("uslab");
    // The thread library (a part of libc since glibc 2.34, a library before).
    println!("cargo:rustc-link-lib=pthread");
    // For crates that compile C against uslab: DEP_USLAB_INCLUDE.
    println!("cargo:include={}", include.display());
    println!("cargo:root={}", root.display());
}
