//! Property tests of `GatherMultiaxis`.
//!
//! 1. The fast kernel is bit-identical to the reference kernel (the oracle) on random calls:
//!    ranks 0 to 8, sizes including 0 and 1, up to four axes in any order (or none),
//!    broadcasting both ways, every element width (1, 2, 4, 8, 16 bytes, bool, string and the
//!    packed 2-, 4- and 6-bit types), int32 and int64 indices with negative and out-of-range
//!    values, each mode, serial and threaded, at each SIMD level the CPU has; a failing call
//!    reports the same first bad index from both kernels, and a bad shape the same error. The
//!    fast kernel on borrowed buffers without slack (`gather_multiaxis_into`, what the
//!    onnxruntime library calls) gives the same bytes.
//! 2. Each mapping of another framework's gather ([`GatherPlan`]s from
//!    `multigather::gather::map`) computes what a direct, loop-by-loop implementation of the
//!    original operator written here computes, on random shapes, axes, batch dimensions, element
//!    types and index values (negative and out of range included).
//!
//! Operand values come from a seeded generator (the seed is part of the case), so proptest
//! shrinks shapes and attributes while the data stays reproducible.

use std::sync::OnceLock;

use multigather::gather::fast::{gather_multiaxis_into, Indices, RawTensor};
use multigather::gather::map::{directml, numpy, onnx, openvino, tensorflow, torch};
use multigather::gather::{
    gather_multiaxis_with, output_shape, reference, FastOptions, GatherError, GatherPlan,
    GatherSpec, OutOfRange, SimdLevel,
};
use multigather::{DataType, Tensor};
use proptest::prelude::*;
use proptest::sample::subsequence;
use proptest::test_runner::TestCaseError;

// ---- shared helpers ----

/// SplitMix64: a small seeded generator for operand values.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn count(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major coordinate of flat position `flat` in `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut coord = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            coord[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    coord
}

/// Row-major flat position of `coord` in `shape`.
fn ravel(coord: &[usize], shape: &[usize]) -> usize {
    coord.iter().zip(shape).fold(0, |acc, (&c, &n)| acc * n + c)
}

/// Every coordinate of `shape`, row-major.
fn coords(shape: &[usize]) -> impl Iterator<Item = Vec<usize>> + '_ {
    (0..count(shape)).map(move |flat| unravel(flat, shape))
}

/// An index value in `[-d, d-1]` as a position in `[0, d)`.
fn wrap(value: i64, d: usize) -> Option<usize> {
    let d = d as i128;
    let v = i128::from(value);
    let v = if v < 0 { v + d } else { v };
    (0..d).contains(&v).then_some(v as usize)
}

/// The element types the tests draw from: every storage width and representation.
const DTYPES: [DataType; 17] = [
    DataType::Uint8,
    DataType::Float8E5M2,
    DataType::Float16,
    DataType::Bfloat16,
    DataType::Float,
    DataType::Int32,
    DataType::Double,
    DataType::Int64,
    DataType::Complex64,
    DataType::Complex128,
    DataType::Bool,
    DataType::String,
    DataType::Int4,
    DataType::Uint4,
    DataType::Uint2,
    DataType::Float6E2M3,
    DataType::Float4E2M1,
];

fn dtype() -> impl Strategy<Value = DataType> {
    proptest::sample::select(&DTYPES[..])
}

fn index_type() -> impl Strategy<Value = DataType> {
    prop_oneof![Just(DataType::Int32), Just(DataType::Int64)]
}

/// Percent of index values drawn out of range: mostly none, so that mode `error` computes.
fn bad_percent() -> impl Strategy<Value = u64> {
    prop_oneof![6 => Just(0u64), 2 => Just(1u64), 1 => Just(15u64)]
}

/// A tensor of random elements (valid bools, short strings, random bits otherwise).
fn random_tensor(dtype: DataType, shape: &[usize], rng: &mut Rng) -> Tensor {
    let n = count(shape);
    match dtype {
        DataType::String => {
            let values = (0..n)
                .map(|_| {
                    let len = rng.below(4) as usize;
                    (0..len).map(|_| b'a' + rng.below(26) as u8).collect()
                })
                .collect();
            Tensor::from_strings(shape, values).unwrap()
        }
        DataType::Bool => {
            let bytes: Vec<u8> = (0..n).map(|_| rng.below(2) as u8).collect();
            Tensor::from_bytes(dtype, shape, &bytes).unwrap()
        }
        _ => {
            let bytes: Vec<u8> = (0..dtype.storage_bytes(n).unwrap())
                .map(|_| rng.next() as u8)
                .collect();
            Tensor::from_bytes(dtype, shape, &bytes).unwrap()
        }
    }
}

/// One index value for an axis of size `d`: in `[-d, d-1]`, or (with probability `bad`
/// percent, and always when `d = 0`) out of range, extremes of the index type included.
fn index_value(rng: &mut Rng, d: usize, bad: u64, int32: bool) -> i64 {
    let d = d as i64;
    if d > 0 && rng.below(100) >= bad {
        return rng.below(2 * d as u64) as i64 - d;
    }
    let (min, max) = if int32 {
        (i64::from(i32::MIN), i64::from(i32::MAX))
    } else {
        (i64::MIN, i64::MAX)
    };
    let k = rng.below(4) as i64;
    match rng.below(6) {
        0 => d,
        1 => d + 1 + k,
        2 => -d - 1,
        3 => -d - 2 - k,
        4 => min,
        _ => max,
    }
}

/// The indices tensor of `values` with element type `index_type`.
fn index_tensor(index_type: DataType, shape: &[usize], values: &[i64]) -> Tensor {
    match index_type {
        DataType::Int32 => {
            let v: Vec<i32> = values.iter().map(|&x| x as i32).collect();
            Tensor::from_vec(index_type, shape, v).unwrap()
        }
        _ => Tensor::from_vec(index_type, shape, values.to_vec()).unwrap(),
    }
}

/// Random indices of `shape`; `bound(flat)` is the size of the axis that value `flat` indexes.
fn random_indices(
    index_type: DataType,
    shape: &[usize],
    bad: u64,
    rng: &mut Rng,
    bound: impl Fn(usize) -> usize,
) -> (Tensor, Vec<i64>) {
    let int32 = index_type == DataType::Int32;
    let values: Vec<i64> = (0..count(shape))
        .map(|flat| index_value(rng, bound(flat), bad, int32))
        .collect();
    (index_tensor(index_type, shape, &values), values)
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Regressions are reported in the failure message; nothing is written next to the test.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---- 1. fast kernel vs reference kernel ----

/// How a non-axis dimension's sizes relate.
#[derive(Clone, Copy, Debug)]
enum Rel {
    /// Input and logical indices have the same size.
    Same,
    /// The input has size 1 (broadcast to the indices).
    InputOne,
    /// The logical indices have size 1 (broadcast to the input).
    IndicesOne,
}

/// A deliberately bad shape, to check both kernels report the same shape error.
#[derive(Clone, Copy, Debug)]
enum Fault {
    None,
    /// A non-axis dimension where input and indices are 2 and 3.
    NotBroadcastable,
    /// A last indices dimension that is not a multiple of the coordinate size.
    LastDim,
}

/// One `GatherMultiaxis` call.
#[derive(Clone, Debug)]
struct Call {
    input: Vec<usize>,
    indices: Vec<usize>,
    axes: Vec<usize>,
    mode: OutOfRange,
    dtype: DataType,
    index_type: DataType,
    bad: u64,
    seed: u64,
}

fn mode() -> impl Strategy<Value = OutOfRange> {
    prop_oneof![
        Just(OutOfRange::Error),
        Just(OutOfRange::Zero),
        Just(OutOfRange::Clamp)
    ]
}

fn rel() -> impl Strategy<Value = Rel> {
    prop_oneof![2 => Just(Rel::Same), 1 => Just(Rel::InputOne), 1 => Just(Rel::IndicesOne)]
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![40 => Just(Fault::None), 1 => Just(Fault::NotBroadcastable), 1 => Just(Fault::LastDim)]
}

/// Small sizes: 0 rarely, 1 often (broadcasting and dropped dimensions).
fn small_size() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![1 => Just(0usize), 12 => Just(1usize), 16 => 2usize..=3, 6 => 4usize..=7]
}

/// Larger sizes, for calls big enough to be split over threads and to stream the offset table.
fn large_size() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![1 => Just(1usize), 1 => 2usize..=9, 3 => 16usize..=128]
}

/// Random calls of rank up to `max_rank` with sizes from `size`, shrunk until the input, the
/// indices and the output each hold at most `budget` elements.
fn call(
    max_rank: usize,
    size: impl Strategy<Value = usize> + Clone + 'static,
    budget: usize,
) -> impl Strategy<Value = Call> {
    (0..=max_rank)
        .prop_flat_map(move |rank| {
            let dims = proptest::collection::vec((size.clone(), rel(), size.clone()), rank);
            let axes = subsequence((0..rank).collect::<Vec<_>>(), 0..=rank.min(4)).prop_shuffle();
            (
                dims,
                axes,
                (mode(), dtype(), index_type(), bad_percent(), fault()),
                any::<u64>(),
            )
        })
        .prop_map(
            move |(mut dims, axes, (mode, dtype, index_type, bad, fault), seed)| {
                let shapes = |dims: &[(usize, Rel, usize)]| -> (Vec<usize>, Vec<usize>) {
                    dims.iter()
                        .enumerate()
                        .map(|(d, &(e, rel, a))| match rel {
                            _ if axes.contains(&d) => (a, e),
                            Rel::Same => (e, e),
                            Rel::InputOne => (1, e),
                            Rel::IndicesOne => (e, 1),
                        })
                        .unzip()
                };
                let c = axes.len().max(1);
                loop {
                    let (input, logical) = shapes(&dims);
                    let output: usize = dims.iter().map(|d| d.0).product();
                    if count(&input) <= budget && count(&logical) * c <= budget && output <= budget
                    {
                        break;
                    }
                    // Halve the largest size; sizes of 2 and more stay at least 1.
                    let big = (0..dims.len())
                        .max_by_key(|&d| dims[d].0.max(dims[d].2))
                        .unwrap_or(0);
                    dims[big].0 = (dims[big].0 / 2).max(dims[big].0.min(1));
                    dims[big].2 = (dims[big].2 / 2).max(dims[big].2.min(1));
                }
                let (mut input, mut indices) = shapes(&dims);
                if let Some(last) = indices.last_mut() {
                    *last *= c;
                }
                match fault {
                    Fault::None => {}
                    Fault::NotBroadcastable => {
                        if let Some(d) = (0..input.len()).find(|d| !axes.contains(d)) {
                            input[d] = 2;
                            indices[d] = if d + 1 == indices.len() { 3 * c } else { 3 };
                        }
                    }
                    Fault::LastDim => {
                        if let (Some(last), true) = (indices.last_mut(), c > 1) {
                            *last += 1;
                        }
                    }
                }
                Call {
                    input,
                    indices,
                    axes,
                    mode,
                    dtype,
                    index_type,
                    bad,
                    seed,
                }
            },
        )
}

/// The SIMD levels this CPU has; levels it lacks are not tested.
fn simd_levels() -> Vec<SimdLevel> {
    [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512]
        .into_iter()
        .filter(|&l| l <= SimdLevel::detected())
        .collect()
}

/// A four-thread pool, so threaded runs split the work whatever the machine.
fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap()
    })
}

/// Runs `call` with the reference kernel and with the fast kernel at every SIMD level, serial
/// and threaded (`grain_bytes` per task), and requires identical results.
fn fast_matches_reference(call: &Call, grain_bytes: usize) -> Result<(), TestCaseError> {
    let mut rng = Rng(call.seed);
    let input = random_tensor(call.dtype, &call.input, &mut rng);
    let c = call.axes.len().max(1);
    let (indices, _) = random_indices(call.index_type, &call.indices, call.bad, &mut rng, |k| {
        call.axes.get(k % c).map_or(3, |&a| call.input[a])
    });
    let spec = GatherSpec::new(call.axes.clone()).with_mode(call.mode);
    let expected = reference::gather_multiaxis(&input, &indices, &spec);
    for level in simd_levels() {
        let serial = FastOptions::serial().with_simd(level);
        let threaded = FastOptions {
            parallel: true,
            grain_bytes,
            simd: Some(level),
        };
        for options in [serial, threaded] {
            let got = pool().install(|| gather_multiaxis_with(&input, &indices, &spec, &options));
            prop_assert_eq!(&got, &expected, "{:?}", options);
            if input.dtype() != DataType::String {
                let got = pool().install(|| gather_borrowed(&input, &indices, &spec, &options));
                prop_assert_eq!(&got, &expected, "borrowed {:?}", options);
            }
        }
    }
    Ok(())
}

/// The fast kernel on borrowed buffers that end exactly at their last byte (no slack), as a
/// host runtime hands them over.
fn gather_borrowed(
    input: &Tensor,
    indices: &Tensor,
    spec: &GatherSpec,
    options: &FastOptions,
) -> Result<Tensor, GatherError> {
    let exact = |bytes: &[u8]| -> Vec<u64> {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        words
    };
    let bytes = input.as_bytes().unwrap();
    let words = exact(bytes);
    let raw = RawTensor {
        dtype: input.dtype(),
        bytes: &bytemuck::cast_slice(&words)[..bytes.len()],
        shape: input.shape(),
    };
    let values = match indices.dtype() {
        DataType::Int32 => Indices::I32(indices.as_slice().unwrap()),
        _ => Indices::I64(indices.as_slice().unwrap()),
    };
    let shape = output_shape(input.shape(), indices.shape(), spec)?;
    let n = input.dtype().storage_bytes(shape.iter().product()).unwrap();
    let mut out = vec![0u64; n.div_ceil(8)];
    let out_bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut out)[..n];
    // SAFETY: `u8` and `MaybeUninit<u8>` have the same layout, and every byte is initialised.
    let uninit = unsafe {
        std::slice::from_raw_parts_mut(
            out_bytes.as_mut_ptr().cast::<std::mem::MaybeUninit<u8>>(),
            n,
        )
    };
    gather_multiaxis_into(raw, values, indices.shape(), spec, options, uninit)?;
    Ok(Tensor::from_bytes(input.dtype(), &shape, &bytemuck::cast_slice(&out)[..n]).unwrap())
}

proptest! {
    #![proptest_config(config(20000))]

    /// Small calls of every shape class, threaded with tiny tasks (many chunk boundaries).
    #[test]
    fn fast_kernel_matches_reference(call in call(8, small_size(), 2000)) {
        fast_matches_reference(&call, 1)?;
    }
}

proptest! {
    #![proptest_config(config(600))]

    /// Calls with up to 64K elements: realistic task sizes, streamed offset tables, long rows
    /// for the hardware gathers.
    #[test]
    fn fast_kernel_matches_reference_on_large_calls(call in call(4, large_size(), 64 * 1024)) {
        fast_matches_reference(&call, 4096)?;
    }
}

// ---- 2. mappings vs direct implementations of the original operators ----

/// The original operator rejects the call (an index out of range).
#[derive(Debug, PartialEq)]
struct Rejected;

/// What a direct implementation computes: the output shape and, per output element, the flat
/// input position it copies (`None`: zero).
type Direct = Result<(Vec<usize>, Vec<Option<usize>>), Rejected>;

/// The output tensor a direct implementation describes.
fn materialize(data: &Tensor, shape: &[usize], sources: &[Option<usize>]) -> Tensor {
    let mut out = Tensor::zeros(data.dtype(), shape).unwrap();
    for (k, source) in sources.iter().enumerate() {
        if let Some(s) = *source {
            out.copy_element_from(k, data, s).unwrap();
        }
    }
    out
}

/// Operands of one mapped call.
#[derive(Debug)]
struct Operands {
    data: Tensor,
    indices: Tensor,
    values: Vec<i64>,
}

/// Random operands: data of `data_shape`, indices of `idx_shape` where value `flat` indexes an
/// axis of size `bound(flat)`.
fn operands(
    data_shape: &[usize],
    idx_shape: &[usize],
    (dtype, index_type, bad, seed): (DataType, DataType, u64, u64),
    bound: impl Fn(usize) -> usize,
) -> Operands {
    let mut rng = Rng(seed);
    let data = random_tensor(dtype, data_shape, &mut rng);
    let (indices, values) = random_indices(index_type, idx_shape, bad, &mut rng, bound);
    Operands {
        data,
        indices,
        values,
    }
}

/// Element type, index type, out-of-range percent and seed of a mapped call.
fn data_params() -> impl Strategy<Value = (DataType, DataType, u64, u64)> {
    (dtype(), index_type(), bad_percent(), any::<u64>())
}

/// A shape of `rank` small sizes (0 rarely).
fn shape(rank: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(prop_oneof![1 => Just(0usize), 20 => 1usize..=4], rank)
}

/// A shape of `rank` sizes of at least 1.
fn nonempty_shape(rank: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(1usize..=4, rank)
}

/// Applies `plan` with both kernels and compares with the direct implementation's result.
fn check_mapping(plan: &GatherPlan, ops: &Operands, direct: Direct) -> Result<(), TestCaseError> {
    for got in [
        plan.apply(&ops.data, &ops.indices),
        plan.apply_reference(&ops.data, &ops.indices),
    ] {
        match &direct {
            Ok((shape, sources)) => {
                let want = materialize(&ops.data, shape, sources);
                prop_assert_eq!(got, Ok(want), "plan:\n{}", plan);
            }
            Err(Rejected) => prop_assert!(
                matches!(got, Err(GatherError::IndexOutOfRange { .. })),
                "expected an out-of-range error, got {:?}; plan:\n{}",
                got,
                plan
            ),
        }
    }
    Ok(())
}

/// What happens to an index outside `[-d, d-1]`.
#[derive(Clone, Copy, Debug)]
enum Bad {
    Reject,
    Zero,
}

/// A source position, or what an out-of-range index does.
fn resolve(value: i64, d: usize, bad: Bad) -> Result<Option<usize>, Rejected> {
    match (wrap(value, d), bad) {
        (Some(i), _) => Ok(Some(i)),
        (None, Bad::Zero) => Ok(None),
        (None, Bad::Reject) => Err(Rejected),
    }
}

/// `out[b.., p.., i.., t..] = data[b.., p.., idx[b.., i..], t..]` with `batch` leading batch
/// dimensions (equal in data and indices): ONNX `Gather`, `numpy.take` with an axis, TensorFlow
/// `gather`, OpenVINO `Gather-8`.
fn direct_batched_take(
    data: &[usize],
    idx: &[usize],
    values: &[i64],
    axis: usize,
    batch: usize,
    bad: Bad,
) -> Direct {
    let m = idx.len() - batch;
    let shape: Vec<usize> = [&data[..axis], &idx[batch..], &data[axis + 1..]].concat();
    let sources = coords(&shape)
        .map(|c| {
            let idx_coord = [&c[..batch], &c[axis..axis + m]].concat();
            let value = values[ravel(&idx_coord, idx)];
            Ok(resolve(value, data[axis], bad)?.map(|i| {
                let from = [&c[..axis], &[i], &c[axis + m..]].concat();
                ravel(&from, data)
            }))
        })
        .collect::<Result<_, _>>()?;
    Ok((shape, sources))
}

/// `out[i..] = flatten(data)[idx[i..]]` (`numpy.take` without an axis, `torch.take`): the
/// output has the indices' shape.
fn direct_flat_take(data: &[usize], idx: &[usize], values: &[i64]) -> Direct {
    let n = count(data);
    let sources = values
        .iter()
        .map(|&v| resolve(v, n, Bad::Reject))
        .collect::<Result<_, _>>()?;
    Ok((idx.to_vec(), sources))
}

/// `out[c] = data[c with c[axis] = idx[c]]` where the other dimensions broadcast (numpy's
/// rules, `take_along_axis`) or, with `broadcast = false`, the output has the indices' shape and
/// the indices may be smaller than the data (`GatherElements`, `torch.gather`).
fn direct_along_axis(
    data: &[usize],
    idx: &[usize],
    values: &[i64],
    axis: usize,
    broadcast: bool,
) -> Direct {
    let shape: Vec<usize> = (0..data.len())
        .map(|d| match (d == axis, broadcast) {
            (true, _) | (false, false) => idx[d],
            (false, true) if data[d] == 1 => idx[d],
            (false, true) => data[d],
        })
        .collect();
    let pick = |c: &[usize], shape: &[usize]| -> Vec<usize> {
        c.iter()
            .zip(shape)
            .map(|(&x, &n)| if n == 1 { 0 } else { x })
            .collect()
    };
    let sources = coords(&shape)
        .map(|c| {
            let value = values[ravel(&pick(&c, idx), idx)];
            let mut from = if broadcast { pick(&c, data) } else { c };
            Ok(resolve(value, data[axis], Bad::Reject)?.map(|i| {
                from[axis] = i;
                ravel(&from, data)
            }))
        })
        .collect::<Result<_, _>>()?;
    Ok((shape, sources))
}

/// ONNX `GatherND` / `tf.gather_nd` with `batch` batch dimensions: `out[b.., i.., t..] =
/// data[b.., idx[b.., i.., 0], .., idx[b.., i.., k-1], t..]`.
fn direct_gather_nd(data: &[usize], idx: &[usize], values: &[i64], batch: usize) -> Direct {
    let q = idx.len();
    let k = idx[q - 1];
    let shape: Vec<usize> = [&idx[..q - 1], &data[batch + k..]].concat();
    let sources = coords(&shape)
        .map(|c| {
            let mut from = c[..batch].to_vec();
            for j in 0..k {
                let at = [&c[..q - 1], &[j]].concat();
                from.push(wrap(values[ravel(&at, idx)], data[batch + j]).ok_or(Rejected)?);
            }
            from.extend_from_slice(&c[q - 1..]);
            Ok(Some(ravel(&from, data)))
        })
        .collect::<Result<_, _>>()?;
    Ok((shape, sources))
}

/// DirectML `DML_GATHER` on tensors of rank `n`: the output sizes `{data[..a], idx[n-d..],
/// data[a+1..]}` right-aligned into `n` dimensions, reads clamped: `[-s, s-1]` counts from the
/// end, below reads 0, above reads `s-1`.
fn direct_directml(data: &[usize], idx: &[usize], values: &[i64], a: usize, d: usize) -> Direct {
    let n = data.len();
    let full: Vec<usize> = [&data[..a], &idx[n - d..], &data[a + 1..]].concat();
    // Right-align: drop the first d-1 sizes (all 1), or prepend a 1 when d = 0.
    let shape: Vec<usize> = if d == 0 {
        [&[1], &full[..]].concat()
    } else {
        full[d - 1..].to_vec()
    };
    let s = data[a];
    let sources = coords(&shape)
        .map(|c| {
            let cf: Vec<usize> = if d == 0 {
                c[1..].to_vec()
            } else {
                [&vec![0; d - 1][..], &c[..]].concat()
            };
            let idx_coord = [&vec![0; n - d][..], &cf[a..a + d]].concat();
            let v = values[ravel(&idx_coord, idx)];
            let i = match wrap(v, s) {
                Some(i) => i,
                None if v < 0 => 0,
                None => s - 1,
            };
            let from = [&cf[..a], &[i], &cf[a + d..]].concat();
            Some(ravel(&from, data))
        })
        .collect();
    Ok((shape, sources))
}

proptest! {
    #![proptest_config(config(3000))]

    /// ONNX `Gather` (= `numpy.take` with an axis = `tf.gather` without batch dimensions =
    /// CoreML `gather`), negative axis included.
    #[test]
    fn onnx_gather_matches_direct(
        data in shape(1..=4), idx in shape(0..=3), axis in any::<prop::sample::Index>(),
        negative_axis: bool, p in data_params(),
    ) {
        let r = data.len();
        let a = axis.index(r);
        let attr = if negative_axis { a as i64 - r as i64 } else { a as i64 };
        let ops = operands(&data, &idx, p, |_| data[a]);
        let direct = || direct_batched_take(&data, &idx, &ops.values, a, 0, Bad::Reject);
        check_mapping(&onnx::gather(r, idx.len(), attr).unwrap(), &ops, direct())?;
        check_mapping(&numpy::take(r, idx.len(), Some(attr)).unwrap(), &ops, direct())?;
    }

    /// ONNX `GatherElements` (= `torch.gather` = CoreML `gather_along_axis`): the indices may be
    /// smaller than the data off the axis.
    #[test]
    fn onnx_gather_elements_matches_direct(
        data in shape(1..=4), smaller in proptest::collection::vec(0usize..=2, 4),
        axis_len in 0usize..=4, axis in any::<prop::sample::Index>(), p in data_params(),
    ) {
        let r = data.len();
        let a = axis.index(r);
        let idx: Vec<usize> = (0..r)
            .map(|d| if d == a { axis_len } else { data[d].saturating_sub(smaller[d]) })
            .collect();
        let ops = operands(&data, &idx, p, |_| data[a]);
        let direct = || direct_along_axis(&data, &idx, &ops.values, a, false);
        check_mapping(&onnx::gather_elements(r, a as i64).unwrap(), &ops, direct())?;
        check_mapping(&torch::gather(r, a as i64 - r as i64).unwrap(), &ops, direct())?;
    }

    /// `numpy.take_along_axis` (= `torch.take_along_dim` with a dim): non-axis dimensions
    /// broadcast both ways.
    #[test]
    fn take_along_axis_matches_direct(
        base in shape(1..=4), ones in proptest::collection::vec(0u8..3, 4),
        axis_len in 0usize..=4, axis in any::<prop::sample::Index>(), p in data_params(),
    ) {
        let r = base.len();
        let a = axis.index(r);
        // Per dimension: both the base size, or one of the two 1.
        let data: Vec<usize> = (0..r).map(|d| if ones[d] == 1 { 1 } else { base[d] }).collect();
        let idx: Vec<usize> = (0..r)
            .map(|d| if d == a { axis_len } else if ones[d] == 2 { 1 } else { base[d] })
            .collect();
        let ops = operands(&data, &idx, p, |_| data[a]);
        let direct = || direct_along_axis(&data, &idx, &ops.values, a, true);
        check_mapping(&numpy::take_along_axis(r, r, Some(a as i64)).unwrap(), &ops, direct())?;
        check_mapping(&torch::take_along_dim(r, r, Some(a as i64)).unwrap(), &ops, direct())?;
    }

    /// Gathers from the flattened data: `numpy.take(axis=None)`, `torch.take`,
    /// `numpy.take_along_axis(axis=None)` and `torch.take_along_dim(dim=None)`.
    #[test]
    fn flat_takes_match_direct(data in shape(0..=3), idx in shape(0..=3), p in data_params()) {
        let n = count(&data);
        let ops = operands(&data, &idx, p, |_| n);
        let direct = || direct_flat_take(&data, &idx, &ops.values);
        let q = idx.len();
        check_mapping(&numpy::take(data.len(), q, None).unwrap(), &ops, direct())?;
        check_mapping(&torch::take(q).unwrap(), &ops, direct())?;
        if q == 1 {
            check_mapping(&numpy::take_along_axis(data.len(), 1, None).unwrap(), &ops, direct())?;
        }
        // torch.take_along_dim(dim=None) flattens the indices too.
        let flat = direct().map(|(_, sources)| (vec![count(&idx)], sources));
        check_mapping(&torch::take_along_dim(data.len(), q, None).unwrap(), &ops, flat)?;
    }

    /// ONNX `GatherND` and `tf.gather_nd` (= CoreML `gather_nd`) with batch dimensions.
    #[test]
    fn gather_nd_matches_direct(
        data in shape(1..=5), index_dims in shape(0..=2), b in 0usize..=4, k in 1usize..=5,
        p in data_params(),
    ) {
        let r = data.len();
        let b = b.min(r - 1);
        let k = k.min(r - b);
        // Indices: the data's batch dimensions, the index dimensions, the coordinates.
        let idx: Vec<usize> = [&data[..b], &index_dims[..], &[k]].concat();
        let ops = operands(&data, &idx, p, |flat| data[b + flat % k]);
        let direct = || direct_gather_nd(&data, &idx, &ops.values, b);
        let q = idx.len();
        check_mapping(&onnx::gather_nd(r, q, k, b as i64).unwrap(), &ops, direct())?;
        check_mapping(&tensorflow::gather_nd(r, q, k, b as i64).unwrap(), &ops, direct())?;
    }

    /// `tf.gather` and OpenVINO `Gather-8` with batch dimensions (negative `batch_dims` and
    /// `axis` included); OpenVINO writes zeros for out-of-range indices.
    #[test]
    fn batched_gathers_match_direct(
        data in shape(1..=5), index_dims in shape(0..=2), b in 0usize..=4,
        axis in any::<prop::sample::Index>(), negative: (bool, bool), p in data_params(),
    ) {
        let r = data.len();
        let b = b.min(r - 1);
        let a = b + axis.index(r - b);
        let idx: Vec<usize> = [&data[..b], &index_dims[..]].concat();
        let q = idx.len();
        let ops = operands(&data, &idx, p, |_| data[a]);
        let batch_attr = if negative.0 && b < q { b as i64 - q as i64 } else { b as i64 };
        let axis_attr = if negative.1 { a as i64 - r as i64 } else { a as i64 };
        let tf = tensorflow::gather(r, q, axis_attr, batch_attr).unwrap();
        check_mapping(&tf, &ops, direct_batched_take(&data, &idx, &ops.values, a, b, Bad::Reject))?;
        let ov = openvino::gather8(r, q, axis_attr, batch_attr).unwrap();
        check_mapping(&ov, &ops, direct_batched_take(&data, &idx, &ops.values, a, b, Bad::Zero))?;
    }

    /// DirectML `DML_GATHER` with `Axis` and `IndexDimensions` (reads clamped).
    #[test]
    fn directml_gather_matches_direct(
        data in nonempty_shape(1..=5), index_sizes in nonempty_shape(5..=5),
        axis in any::<prop::sample::Index>(), d in 0usize..=5, p in data_params(),
    ) {
        let n = data.len();
        let a = axis.index(n);
        let d = d.min(n);
        let mut data = data;
        let mut index_sizes = index_sizes[..d].to_vec();
        // The first d-1 of the concatenated output sizes are cropped and must be 1.
        for j in 0..d.saturating_sub(1) {
            if j < a {
                data[j] = 1;
            } else {
                index_sizes[j - a] = 1;
            }
        }
        let idx: Vec<usize> = [&vec![1; n - d][..], &index_sizes[..]].concat();
        let ops = operands(&data, &idx, p, |_| data[a]);
        let direct = direct_directml(&data, &idx, &ops.values, a, d);
        check_mapping(&directml::gather(n, a, d).unwrap(), &ops, direct)?;
    }
}

/// Regression: a streamed offset table (over 4096 tuples) whose tiles start inside an index row
/// made the kernel compute a table position below the tile (it overflowed in checked builds).
#[test]
fn streamed_tile_starting_inside_an_index_row() {
    let mut rng = Rng(7);
    let input = random_tensor(DataType::Uint8, &[1, 90, 46], &mut rng);
    let (indices, _) = random_indices(DataType::Int32, &[1, 90, 46], 0, &mut rng, |_| 3);
    let spec = GatherSpec::new(vec![]);
    let expected = reference::gather_multiaxis(&input, &indices, &spec).unwrap();
    for options in [FastOptions::serial(), FastOptions::default()] {
        let got = pool().install(|| gather_multiaxis_with(&input, &indices, &spec, &options));
        assert_eq!(got.unwrap(), expected, "{options:?}");
    }
}
