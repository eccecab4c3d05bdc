//! The attribute parse every engine of `GatherMultiaxis` shares (the interpreter, the lowering and
//! the onnxruntime library): any `axes` and `mode` of any type, then a spec for any rank. It
//! never panics, and accepts exactly what the schema allows: `axes` as ints, `mode` as one of
//! the three names (bytes compared whole, NUL included).
#![no_main]

use libfuzzer_sys::fuzz_target;
use multigather::gather::{MultiaxisAttributes, OutOfRange, RawAttr};

const OTHER: [&str; 6] = ["int", "float", "floats", "tensor", "graph", "strings"];

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let (axes_bytes, mode) = rest.split_at(rest.len() / 2);
    let ints: Vec<i64> = axes_bytes
        .chunks(2)
        .map(|c| i64::from(i8::from_le_bytes([c[0]])) * i64::from(*c.get(1).unwrap_or(&1)))
        .collect();
    let axes = match shape % 4 {
        0 => None,
        1 => Some(RawAttr::Other(OTHER[usize::from(shape / 4) % OTHER.len()])),
        2 => Some(RawAttr::String(axes_bytes)),
        _ => Some(RawAttr::Ints(&ints)),
    };
    let mode_attr = match (shape / 16) % 4 {
        0 => None,
        1 => Some(RawAttr::Other(OTHER[usize::from(shape / 64) % OTHER.len()])),
        2 => Some(RawAttr::Ints(&ints)),
        _ => Some(RawAttr::String(mode)),
    };
    match MultiaxisAttributes::parse(axes, mode_attr) {
        Ok(attrs) => {
            assert!(matches!(axes, Some(RawAttr::Ints(_))));
            match mode_attr {
                None => assert_eq!(attrs.mode, OutOfRange::Error),
                Some(RawAttr::String(m)) => assert_eq!(m, attrs.mode.name().as_bytes()),
                Some(_) => unreachable!("a mode that is not a string was accepted"),
            }
            for rank in 0..8 {
                let _ = attrs.spec(rank);
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
