//! uslab as the program's global allocator: every Box, Vec and String
//! below comes from uslab's kmalloc caches, which the statistics show.
//!
//!     cargo run --example global

use std::collections::BTreeMap;

#[global_allocator]
static GLOBAL: uslab::UslabAlloc = uslab::UslabAlloc;

fn main() -> std::io::Result<()> {
    let mut index: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let text = "the quick brown fox jumps over the lazy dog ".repeat(2000);
    for (pos, word) in text.split_whitespace().enumerate() {
        index.entry(word.to_string()).or_default().push(pos);
    }
    println!("uslab {}: {} distinct words indexed", uslab::version(), index.len());

    let m = uslab::malloc_info()?;
    println!(
        "malloc family: {} KiB in use, {} KiB of segments, {} KiB cached",
        m.in_use_bytes >> 10,
        m.segment_bytes >> 10,
        m.cached_bytes >> 10
    );
    // The kmalloc-* rows are Rust's allocations.
    print!("{}", uslab::stats_string(uslab::StatsForm::Table));
    Ok(())
}
