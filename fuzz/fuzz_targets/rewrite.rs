//! Fuzz target `rewrite`: arbitrary bytes loaded as a model, then the `GatherToMultiaxis` pass.
//!
//! The pass runs through the `PassManager`, which validates the model after it; any `Err` is
//! fine (a node the pass cannot prove is skipped, a model the loader let through may still be
//! refused), a panic is not. What the pass produced must then save, and a second run must change
//! nothing (ARCHITECTURE.md: the rewrite is idempotent).

#![no_main]

use libfuzzer_sys::fuzz_target;
use multigather::pass::{GatherToMultiaxis, Pass, PassManager, RewriteConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(mut model) = multigather::io::load_bytes(data) else {
        return;
    };
    let mut pass = GatherToMultiaxis::new(RewriteConfig::default());
    if PassManager::new()
        .run(&mut model, &mut [&mut pass])
        .is_err()
    {
        return;
    }
    model
        .validate()
        .expect("the pass manager validated the model");
    multigather::io::to_bytes(&model).expect("a rewritten model saves");
    let mut second = GatherToMultiaxis::new(RewriteConfig::default());
    let changed = second
        .run(&mut model)
        .expect("a rewritten model rewrites again");
    assert!(!changed, "a second rewrite changed the model");
});
