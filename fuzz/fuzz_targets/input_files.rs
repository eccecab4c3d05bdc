//! Fuzz target `input_files`: random bytes as the tensor files `run`, `verify` and `test` read,
//! a numpy `.npy` file or a serialized `TensorProto` (`.pb`), chosen by the first byte.
//!
//! Reading must return `Ok` or a clean `Err`: never panic, never allocate beyond what the file's
//! own bytes justify. A tensor that reads has dims ONNX can state (each at most 2^63-1), and
//! written back as a `.pb` it reads back the same.

#![no_main]

use libfuzzer_sys::fuzz_target;
use multigather::io::files::{read_tensor, tensor_from_bytes, write_tensor_pb};

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    let npy = kind & 1 == 1;
    let Ok((name, tensor)) = tensor_from_bytes(bytes.to_vec(), npy) else {
        return;
    };
    assert!(
        tensor.shape().iter().all(|&d| d <= i64::MAX as usize),
        "a dim beyond int64: {:?}",
        tensor.shape()
    );
    // Written back and read again, through a file as `run --output-dir` writes one.
    let dir = std::env::temp_dir().join(format!("mg-fuzz-input-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let path = dir.join("t.pb");
    let name = name.unwrap_or_else(|| "t".to_owned());
    write_tensor_pb(&path, &name, &tensor).expect("a tensor that reads can be written");
    let (back_name, back) = read_tensor(&path).expect("a written tensor reads back");
    assert_eq!(back_name.as_deref(), Some(name.as_str()));
    assert_eq!(back.shape(), tensor.shape());
    assert_eq!(back.dtype(), tensor.dtype());
    // Bit-for-bit: NaN payloads included.
    if let (Ok(a), Ok(b)) = (back.as_bytes(), tensor.as_bytes()) {
        assert_eq!(a, b);
    }
});
