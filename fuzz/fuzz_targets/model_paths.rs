//! Fuzz target `model_paths`: random bytes as a model file and its external data file, loaded
//! the way the Python package loads a path (`FileAccess::Read`) and the way the binary does
//! (`FileAccess::Map`).
//!
//! Both must return `Ok` or a clean `Err`, never panic, and agree: the same error message, or
//! models that save to the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use multigather::io::{self, FileAccess, LoadOptions};

fuzz_target!(|data: &[u8]| {
    // The first two bytes split the rest into the model and `weights.bin`.
    let Some((split, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let at = usize::from(u16::from_le_bytes(*split)).min(rest.len());
    let (model, weights) = rest.split_at(at);
    let dir = std::env::temp_dir().join(format!("mg-fuzz-model-paths-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let path = dir.join("model.onnx");
    std::fs::write(&path, model).expect("write the model");
    std::fs::write(dir.join("weights.bin"), weights).expect("write the weights");
    let load = |access| {
        let options = LoadOptions {
            access,
            ..LoadOptions::default()
        };
        io::load_with(&path, &options).and_then(|m| io::to_bytes(&m))
    };
    match (load(FileAccess::Read), load(FileAccess::Map)) {
        (Ok(read), Ok(mapped)) => assert!(read == mapped, "read and mapped loads differ"),
        (Err(read), Err(mapped)) => assert_eq!(read.to_string(), mapped.to_string()),
        (read, mapped) => panic!("read {:?} but mapped {:?}", read.err(), mapped.err()),
    }
});
