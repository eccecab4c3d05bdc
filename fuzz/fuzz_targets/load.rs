//! Fuzz target `load`: arbitrary bytes as a model file.
//!
//! Loading must return `Ok` or a clean `Err`: never panic, overflow the stack or allocate what
//! the file does not hold. A model that loads must also print as text (what `inspect` shows a
//! user first) and survive the round trip the README promises: saved and loaded again, it saves
//! to the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use multigather::io;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = io::load_bytes(data) else {
        return;
    };
    let _ = multigather::text::model_to_text(&model);
    let bytes = io::to_bytes(&model).expect("a loaded model saves");
    let again = io::load_bytes(&bytes).expect("a saved model loads again");
    let bytes2 = io::to_bytes(&again).expect("a reloaded model saves");
    assert!(bytes == bytes2, "load, save, load, save is not stable");
});
