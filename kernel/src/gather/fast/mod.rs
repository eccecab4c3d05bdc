//! The fast `GatherMultiaxis` kernel, bit-identical to [`super::reference`] on every input.
//!
//! Why one file: it is the kernel's driver (options, the choice between the streamed, tabled,
//! rowwise and staged paths, the threading); each step's code lives in a file of its own.
//!
//! The work is split in three steps:
//!
//! 1. **Canonicalise** (`canon`): drop unit dimensions, classify the rest as index or block
//!    dimensions (broadcasting is a zero stride), merge neighbours that are contiguous in both
//!    operands. A gather ends up as a few loops: outer × index tuples × inner block.
//! 2. **Index pre-pass** (`offsets`): validate every index tuple, count negatives from the end,
//!    apply the mode, fold in the input offset of non-axis index dimensions, and produce one
//!    element offset per tuple. The first bad index (lowest position in the indices) is reported.
//!    Nothing is read from the input before its offsets are validated, and every offset is
//!    checked against the input size before use, so no index value can cause an out-of-bounds
//!    read.
//! 3. **Copy** (`rows`): walk the output front to back, one row of the innermost dimension at a
//!    time: block copies for contiguous rows, element gathers (hardware gathers, `simd`) for
//!    index rows. The output is allocated uninitialised and written exactly once.
//!
//! When every index dimension is outside every block dimension (embedding lookups,
//! GatherElements, GatherND) each offset is used once, in order, so steps 2 and 3 run
//! interleaved on small tiles that stay in L1 ("streamed"); otherwise the offset table, which is
//! then smaller than the output, is built first.
//!
//! Two shapes of `GatherElements` have kernels of their own, with steps 2 and 3 fused:
//! `rowwise` (along the last axis: rows are prefetched whole, one ahead) and `staged` (along
//! an outer axis of a large input: column tiles of every row are staged in L2 first).
//!
//! Parallelism: the output is cut into chunks of at least [`FastOptions::grain_bytes`], processed
//! on the current rayon pool (`pool.install(|| gather_multiaxis(..))` bounds the threads); below
//! two grains it runs serially on the calling thread.

mod canon;
mod elem;
mod offsets;
mod rows;
mod rowwise;
mod simd;
mod staged;

use crate::tensor::try_vec;
use std::mem::MaybeUninit;

use crate::par::{self, Workers};

use self::canon::Layout;
use self::elem::{Offset, Word};
use self::offsets::BadIndex;
use self::rows::{drive, BlockCopy, ByteSink, Inner, PackedSink, RowSink, StringSink};
use super::{check_operands, unravel, GatherError, GatherSpec, OutOfRange};
use crate::tensor::{element_count, Tensor, TensorError};
use crate::DataType;

pub use self::elem::SimdLevel;
pub use self::offsets::Indices;

/// Tuning knobs of the fast kernel. The defaults are what [`gather_multiaxis`] uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FastOptions {
    /// Split large outputs over the current rayon pool (default `true`).
    pub parallel: bool,
    /// Minimum output bytes per parallel task; outputs under two grains run serially
    /// (default 64 KiB).
    pub grain_bytes: usize,
    /// Highest SIMD level to use: element gathers use exactly this level, the index pre-pass
    /// at most this level. `None` (default) means [`SimdLevel::preferred`] for the gathers and
    /// [`SimdLevel::detected`] for the pre-pass. A level above what the CPU has is lowered to it.
    pub simd: Option<SimdLevel>,
}

impl Default for FastOptions {
    fn default() -> FastOptions {
        FastOptions {
            parallel: true,
            grain_bytes: 64 * 1024,
            simd: None,
        }
    }
}

impl FastOptions {
    /// Serial execution on the calling thread.
    pub fn serial() -> FastOptions {
        FastOptions {
            parallel: false,
            ..FastOptions::default()
        }
    }

    /// The same options limited to one SIMD level.
    pub fn with_simd(mut self, level: SimdLevel) -> FastOptions {
        self.simd = Some(level);
        self
    }

    /// Who runs the parallel tasks: the current rayon pool, or the calling thread alone.
    fn workers(&self) -> &'static dyn Workers {
        if self.parallel {
            &par::Pool
        } else {
            &par::Serial
        }
    }

    /// The level of the element gathers.
    fn gather_level(&self) -> SimdLevel {
        self.simd
            .unwrap_or_else(SimdLevel::preferred)
            .min(SimdLevel::detected())
    }

    /// The level of the index pre-pass.
    fn vector_level(&self) -> SimdLevel {
        self.simd
            .unwrap_or_else(SimdLevel::detected)
            .min(SimdLevel::detected())
    }
}

/// `GatherMultiaxis(input, indices, axes, mode)` with the fast kernel on the current rayon pool.
///
/// `indices` must be `int32` or `int64`; the output has the input's element type. Errors name
/// the problem: shapes and axes (see [`super::output_shape`]) or the first out-of-range index.
///
/// # Example
/// ```
/// use multigather_kernel::gather::{gather_multiaxis, GatherSpec, OutOfRange};
/// use multigather_kernel::{DataType, Tensor};
/// // 2-D point lookups: coordinates (y, x) folded into the last dimension of the indices.
/// let image = Tensor::from_vec(DataType::Float, &[2, 3], vec![0.0f32, 1.0, 2.0, 10.0, 11.0, 12.0])?;
/// let points = Tensor::from_vec(DataType::Int64, &[3, 2], vec![1i64, 2, 0, -1, 7, 0])?;
/// let spec = GatherSpec::new(vec![0, 1]).with_mode(OutOfRange::Zero);
/// // Logical indices shape [3, 1]: axis 0 takes 3, axis 1 takes 1.
/// let out = gather_multiaxis(&image, &points.into_shape(&[3, 2])?, &spec)?;
/// assert_eq!(out.shape(), &[3, 1]);
/// assert_eq!(out.as_slice::<f32>()?, &[12.0, 2.0, 0.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn gather_multiaxis(
    input: &Tensor,
    indices: &Tensor,
    spec: &GatherSpec,
) -> Result<Tensor, GatherError> {
    gather_multiaxis_with(input, indices, spec, &FastOptions::default())
}

/// [`gather_multiaxis`] with explicit options.
pub fn gather_multiaxis_with(
    input: &Tensor,
    indices: &Tensor,
    spec: &GatherSpec,
    options: &FastOptions,
) -> Result<Tensor, GatherError> {
    gather_shaped(
        input,
        input.shape(),
        indices,
        indices.shape(),
        spec,
        options,
    )
}

/// The kernel on tensors viewed with other shapes of the same element counts (what a plan's
/// shape operations produce), without copying them.
pub(crate) fn gather_shaped(
    input: &Tensor,
    input_shape: &[usize],
    indices: &Tensor,
    indices_shape: &[usize],
    spec: &GatherSpec,
    options: &FastOptions,
) -> Result<Tensor, GatherError> {
    for (t, shape) in [(input, input_shape), (indices, indices_shape)] {
        if element_count(shape) != Some(t.len()) {
            return Err(TensorError::Reshape {
                from: t.shape().to_vec(),
                from_len: t.len(),
                to: shape.to_vec(),
                to_len: element_count(shape).unwrap_or(usize::MAX),
            }
            .into());
        }
    }
    let output_shape = check_operands(input_shape, indices, indices_shape, spec)?;
    if element_count(&output_shape) == Some(0) {
        return Ok(Tensor::zeros(input.dtype(), &output_shape)?);
    }
    let layout = Layout::new(input_shape, indices_shape, spec, &output_shape)?;
    let values = match indices.dtype() {
        DataType::Int32 => Indices::I32(indices.as_slice()?),
        _ => Indices::I64(indices.as_slice()?),
    };
    let call = Call {
        layout,
        indices: values,
        input_shape,
        indices_shape,
        spec,
        options,
        workers: options.workers(),
        output_shape: &output_shape,
        overhang: if input.padded_bytes().is_some() {
            0
        } else {
            overhang(input.dtype())
        },
    };
    if call.layout.n_in < u32::MAX as usize {
        call.run::<u32>(input)
    } else {
        call.run::<u64>(input)
    }
}

/// Borrowed element bytes of a fixed-width or packed tensor (not `string`): the input operand of
/// [`gather_multiaxis_into`].
#[derive(Clone, Copy, Debug)]
pub struct RawTensor<'a> {
    /// The element type.
    pub dtype: DataType,
    /// The elements as little-endian bytes (packed for sub-byte types), exactly
    /// `dtype.storage_bytes(element count)` long and aligned for the element width.
    pub bytes: &'a [u8],
    /// The dimensions, outermost first.
    pub shape: &'a [usize],
}

/// The fast kernel on borrowed buffers: reads `input` and `indices` where they are and writes the
/// output bytes into `out`, which must be exactly `input.dtype.storage_bytes(n)` long for the `n`
/// elements of the output shape (see [`super::output_shape`]) and aligned like the input.
///
/// This is the entry point for hosts that own the memory (a runtime's custom-op library): no
/// copy in or out. `string` tensors go through [`gather_multiaxis`]. On error `out` may be
/// partly written. The checks and messages are those of [`gather_multiaxis`].
///
/// # Example
/// ```
/// use std::mem::MaybeUninit;
/// use multigather_kernel::gather::fast::{gather_multiaxis_into, FastOptions, Indices, RawTensor};
/// use multigather_kernel::gather::GatherSpec;
/// use multigather_kernel::DataType;
/// let data: Vec<u32> = vec![0, 1, 2, 10, 11, 12];
/// let input = RawTensor { dtype: DataType::Uint32, bytes: bytemuck::cast_slice(&data), shape: &[2, 3] };
/// // Per-row lookups along axis 1, indices [1, 2] broadcast over the rows: output [2, 2].
/// let mut out = vec![MaybeUninit::new(0u32); 4];
/// let out_bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), 16) };
/// let spec = GatherSpec::new(vec![1]);
/// gather_multiaxis_into(input, Indices::I64(&[2, 0]), &[1, 2], &spec, &FastOptions::serial(), out_bytes)?;
/// let out: Vec<u32> = out.iter().map(|x| unsafe { x.assume_init() }).collect();
/// assert_eq!(out, [2, 0, 12, 10]);
/// # Ok::<(), multigather_kernel::gather::GatherError>(())
/// ```
pub fn gather_multiaxis_into(
    input: RawTensor<'_>,
    indices: Indices<'_>,
    indices_shape: &[usize],
    spec: &GatherSpec,
    options: &FastOptions,
    out: &mut [MaybeUninit<u8>],
) -> Result<(), GatherError> {
    let workers = options.workers();
    gather_multiaxis_into_on(workers, input, indices, indices_shape, spec, options, out)
}

/// [`gather_multiaxis_into`] with its parallel tasks run by `workers` (a host's thread pool)
/// instead of the current rayon pool; `options.parallel` is not consulted. The work is cut as
/// for `workers.threads()` threads, so a host pool of fewer threads runs the same tasks with
/// the same result.
///
/// # Example
/// ```
/// use std::mem::MaybeUninit;
/// use multigather_kernel::gather::fast::{gather_multiaxis_into_on, FastOptions, Indices, RawTensor};
/// use multigather_kernel::gather::GatherSpec;
/// use multigather_kernel::{par, DataType};
/// let data: Vec<u8> = (0..=255).collect();
/// let input = RawTensor { dtype: DataType::Uint8, bytes: &data, shape: &[256] };
/// let mut out = [MaybeUninit::new(0u8); 3];
/// let spec = GatherSpec::new(vec![0]);
/// let options = FastOptions::default();
/// gather_multiaxis_into_on(&par::Serial, input, Indices::I32(&[7, -1, 0]), &[3], &spec, &options, &mut out)?;
/// assert_eq!(out.map(|x| unsafe { x.assume_init() }), [7, 255, 0]);
/// # Ok::<(), multigather_kernel::gather::GatherError>(())
/// ```
pub fn gather_multiaxis_into_on(
    workers: &dyn Workers,
    input: RawTensor<'_>,
    indices: Indices<'_>,
    indices_shape: &[usize],
    spec: &GatherSpec,
    options: &FastOptions,
    out: &mut [MaybeUninit<u8>],
) -> Result<(), GatherError> {
    let dtype = input.dtype;
    let storage = |shape: &[usize]| -> Result<usize, GatherError> {
        element_count(shape)
            .and_then(|n| dtype.storage_bytes(n))
            .ok_or_else(|| {
                TensorError::TooLarge {
                    dtype,
                    shape: shape.to_vec(),
                }
                .into()
            })
    };
    if dtype == DataType::String {
        return Err(TensorError::Representation {
            dtype,
            wanted: "fixed-width",
        }
        .into());
    }
    let expected = storage(input.shape)?;
    if input.bytes.len() != expected {
        return Err(TensorError::ByteLength {
            dtype,
            shape: input.shape.to_vec(),
            expected,
            actual: input.bytes.len(),
        }
        .into());
    }
    if element_count(indices_shape) != Some(indices.len()) {
        return Err(TensorError::ElementCount {
            shape: indices_shape.to_vec(),
            expected: element_count(indices_shape).unwrap_or(usize::MAX),
            actual: indices.len(),
        }
        .into());
    }
    let output_shape = super::output_shape(input.shape, indices_shape, spec)?;
    let expected = storage(&output_shape)?;
    if out.len() != expected {
        return Err(TensorError::ByteLength {
            dtype,
            shape: output_shape,
            expected,
            actual: out.len(),
        }
        .into());
    }
    if expected == 0 {
        return Ok(());
    }
    let call = Call {
        layout: Layout::new(input.shape, indices_shape, spec, &output_shape)?,
        indices,
        input_shape: input.shape,
        indices_shape,
        spec,
        options,
        workers,
        output_shape: &output_shape,
        overhang: overhang(dtype),
    };
    if call.layout.n_in < u32::MAX as usize {
        call.run_bytes::<u32>(dtype, input.bytes, None, out)
    } else {
        call.run_bytes::<u64>(dtype, input.bytes, None, out)
    }
}

/// Outputs of at least [`stream_min_bytes`] per thread get their block rows with non-temporal
/// stores (`simd::stream_copy`), smaller ones with ordinary vector stores (`simd::vector_copy`).
///
/// What decides is whether the output, the rows it reads and the output of the previous run (a
/// runtime's buffer pool alternates two) stay in the L3 together: then ordinary stores leave
/// everything cached for the next reader, while non-temporal ones are bound by the write
/// bandwidth to memory. That differs by machine more than by size, so the threshold is the
/// CPU's: this one (4 MiB) on AMD CPUs before Zen 5, [`STREAM_MIN_BYTES_ZEN5`] on Zen 5, and
/// one derived from the L3's size on others ([`stream_min_bytes`]).
///
/// Measured on an AMD EPYC Zen 3 (family 0x19, AVX2, 2 vCPUs under KVM, 32 MiB L3 reported, a
/// busy host: a `memcpy` of 8 MiB ran at 11 GB/s, of 64 MiB at 6 GB/s) with
/// `multigather run --repeat 200`, medians of 5 interleaved runs, streamed from 4 MiB against
/// ordinary stores below 10 MiB, 1 thread: `gathernd_batch` (8 MiB) 0.56 against 1.15 ms, the
/// fp16 embedding lookup (6 MiB) 0.37 against 0.43 ms; 2 threads, `gathernd_batch` 0.62
/// against 1.04 ms. On the Zen 5 machine below, ordinary stores won by 5-10% at these sizes.
const STREAM_MIN_BYTES: usize = 4 << 20;

/// [`STREAM_MIN_BYTES`] on AMD Zen 5, whose L3 kept the working set of three outputs.
///
/// The write bandwidth to memory that bounds non-temporal stores was about 40 GB/s per Zen 5
/// core (an AMD EPYC with AVX-512, 2 vCPUs: a micro-benchmark of random 512-byte rows reached
/// 41 GB/s, the same as sequential rows), and less when the host's other tenants used it: at
/// times two threads shared 40 GB/s. Measured on that Zen 5 (32 MiB L3) with
/// `multigather run --repeat 300`, medians of 5-11 interleaved runs (spread in parentheses),
/// streamed against ordinary vector stores, 1 thread: the fp16 embedding lookup (6 MiB) 0.157
/// (0.153-0.166) against 0.141 (0.137-0.151) ms;
/// `gathernd_batch` (8 MiB) 0.210 (0.208-0.218) against 0.218 (0.209-0.242); the fp32
/// embedding lookup (12 MiB) 0.40 (0.36-0.41) against 0.63 (0.54-0.73); 100,000 rows of
/// 256 bytes (25 MiB) 0.94 against 1.29. 2 threads (the process under `chrt -f 10`, so that
/// other work on the machine does not take the second core): the fp16 lookup 0.095 against
/// 0.077; `gathernd_batch` 0.117 against 0.093, and 0.220 against 0.115 while the memory
/// bandwidth was shared; the fp32 lookup 0.162 against 0.144; the 25 MiB of 256-byte rows
/// 0.43 against 0.56. Hence the threshold per thread: each core's L2 and share of the L3 take
/// its part. The cost: when other work holds the second core, a 2-thread call runs on one and
/// `gathernd_batch` takes 0.305 against 0.228 ms streamed, the fp32 lookup 0.554 against 0.439
/// (onnxruntime at 2 threads took 0.37 and 1.03 ms in such a minute).
///
/// The 8 MiB of `gathernd_batch` sit on the line: measured again later, with 1,000 runs and
/// three interleaved pairs, ordinary stores took 0.176-0.184 ms against 0.193-0.203 streamed
/// (and 0.103 against 0.113 at 2 threads), while the 12 MiB fp32 lookup kept its gain from
/// streaming (0.287 against 0.345). Three times 8 MiB fits the 32 MiB L3 and three times
/// 12 MiB does not, so the threshold lies between them.
const STREAM_MIN_BYTES_ZEN5: usize = 10 << 20;

/// The output bytes per thread from which block rows are streamed (see [`STREAM_MIN_BYTES`]).
///
/// On CPUs other than AMD's, a third of the L3 the CPU reports (`cpuid` leaf 4), at least
/// [`STREAM_MIN_BYTES`]: the output, the rows it reads and the previous run's output fit the L3
/// together below it. Measured on an Intel Xeon with AVX-512 (2 vCPUs under KVM, 480 MiB L3
/// reported, so nothing in the shared benchmark streams) with `multigather run --repeat 200`,
/// two interleaved pairs, medians, ordinary stores against streamed from 4 MiB, 1 thread: the
/// fp32 embedding lookup (12 MiB) 0.950-0.956 against 1.102-1.116 ms, the fp16 one (6 MiB)
/// 0.496-0.511 against 0.614-0.620, `gathernd_batch` (8 MiB) 0.616-0.637 against 0.748-0.752,
/// 100,000 rows of 256 bytes (25 MiB) 1.900-1.902 against 1.893-1.897; at 2 threads the fp32
/// lookup 0.533-0.535 against 0.605-0.620.
fn stream_min_bytes() -> usize {
    if simd::zen5_or_later() {
        STREAM_MIN_BYTES_ZEN5
    } else if simd::amd() {
        STREAM_MIN_BYTES
    } else {
        simd::l3_bytes().map_or(STREAM_MIN_BYTES, |l3| (l3 / 3).max(STREAM_MIN_BYTES))
    }
}

/// Offset-table entries per tile when the table is streamed.
const TILE: usize = 1024;
/// Tables with fewer entries are built up front even when they could be streamed: they are
/// cheap, and streaming would tie all the work to few table entries.
const STREAM_MIN: usize = 4 * TILE;

/// Everything one call needs, shared by the chunks.
struct Call<'a> {
    layout: Layout,
    indices: Indices<'a>,
    input_shape: &'a [usize],
    indices_shape: &'a [usize],
    spec: &'a GatherSpec,
    options: &'a FastOptions,
    workers: &'a dyn Workers,
    output_shape: &'a [usize],
    /// Elements past its last one that the hardware gathers of the input's element type read
    /// (they load 4 bytes, so 3 for 1-byte and 1 for 2-byte elements) and that the input buffer
    /// lacks: 0 when it has the slack (or the elements are wide).
    overhang: usize,
}

/// The offset table: built up front, or streamed tile by tile.
enum Table<O> {
    Built { t: Vec<O>, simd: bool },
    Streamed,
}

/// Why a chunk stopped.
enum Stop {
    Bad(BadIndex),
    Bound,
}

impl Call<'_> {
    fn run<O: Offset>(&self, input: &Tensor) -> Result<Tensor, GatherError> {
        let dtype = input.dtype();
        if dtype == DataType::String {
            let (table, inner) = self.prepare::<O>()?;
            let source = input.as_strings()?;
            let mut out = vec![Vec::new(); self.layout.n_out];
            self.execute(
                &table,
                &mut out,
                8,
                32,
                |chunk| StringSink::new(source, chunk, inner),
                |_| {},
            )?;
            return Ok(Tensor::from_strings(self.output_shape, out)?);
        }
        let mut out = Tensor::uninit(dtype, self.output_shape)?;
        let payload = input.as_bytes()?;
        self.run_bytes::<O>(dtype, payload, input.padded_bytes(), out.bytes_mut())?;
        // SAFETY: `run_bytes` returned `Ok`, so every chunk ran to its end: the sinks wrote every
        // output element, front to back, and the packed sinks flushed their last byte with zero
        // padding bits.
        Ok(unsafe { out.assume_init() })
    }

    /// The offset table (or the decision to stream it) and the innermost loop's kind.
    fn prepare<O: Offset>(&self) -> Result<(Table<O>, Inner), GatherError> {
        let table = if self.layout.streamed && self.layout.t.count >= STREAM_MIN {
            Table::Streamed
        } else {
            self.build_table()?
        };
        let inner = Inner::of(self.layout.dims.last().unwrap_or(&canon::Dim {
            size: 1,
            in_stride: 1,
            t_stride: 0,
        }));
        Ok((table, inner))
    }

    /// Writes every output byte of a fixed-width or packed call into `out`. `padded` is the
    /// payload followed by at least 8 bytes of slack, when the caller has it: without it the
    /// hardware gathers of 1- and 2-byte elements (which load 4 bytes) are used only where
    /// their loads stay inside the payload ([`Call::overhang`]).
    fn run_bytes<O: Offset>(
        &self,
        dtype: DataType,
        payload: &[u8],
        padded: Option<&[u8]>,
        out: &mut [MaybeUninit<u8>],
    ) -> Result<(), GatherError> {
        let (table, inner) = self.prepare::<O>()?;
        let zero = self.spec.mode == OutOfRange::Zero;
        let bits = dtype.bits();
        match bits {
            8 => self.run_words::<u8, O>(&table, payload, padded, out, inner, zero),
            16 => self.run_words::<u16, O>(&table, payload, padded, out, inner, zero),
            32 => self.run_words::<u32, O>(&table, payload, padded, out, inner, zero),
            64 => self.run_words::<u64, O>(&table, payload, padded, out, inner, zero),
            128 => self.run_words::<[u64; 2], O>(&table, payload, padded, out, inner, zero),
            _ => self.execute(
                &table,
                out,
                bits,
                1,
                |chunk| PackedSink::new(payload, bits, chunk, inner),
                |sink| sink.finish(),
            ),
        }
    }

    fn run_words<W: Word, O: Offset>(
        &self,
        table: &Table<O>,
        payload: &[u8],
        padded: Option<&[u8]>,
        out: &mut [MaybeUninit<u8>],
        inner: Inner,
        zero: bool,
    ) -> Result<(), GatherError> {
        let input: &[W] =
            bytemuck::try_cast_slice(payload).map_err(|_| internal("misaligned input"))?;
        let out = cast_uninit::<W>(out).ok_or_else(|| internal("misaligned output"))?;
        if let Some(rows) = rowwise::Rows::new(&self.layout, size_of::<W>()) {
            return self.run_rows(&rows, input, padded, out);
        }
        if let Some(columns) = staged::Columns::new(&self.layout, size_of::<W>()) {
            return self.run_staged(&columns, input, out);
        }
        // Hardware gathers of 1- and 2-byte elements load 4 bytes: without the slack, the
        // bound check (`overhang`) allows them only where the loads stay inside the payload.
        let simd = W::simd_gather(self.options.gather_level());
        let padded = padded.unwrap_or(payload);
        let bits = 8 * size_of::<W>();
        let level = self.options.vector_level();
        let per_thread = std::mem::size_of_val(out) / self.workers.threads().max(1);
        let block_copy = if per_thread >= stream_min_bytes() {
            simd::stream_copy(level).map(|copy| BlockCopy {
                copy,
                streamed: true,
            })
        } else {
            simd::vector_copy(level).map(|copy| BlockCopy {
                copy,
                streamed: false,
            })
        };
        self.execute(
            table,
            out,
            8,
            bits / 8,
            |chunk| ByteSink::new(input, padded, chunk, inner, zero, simd, block_copy),
            |_| {},
        )
    }

    /// A row-wise element gather ([`rowwise`]), in chunks of output elements.
    fn run_rows<W: Word>(
        &self,
        rows: &rowwise::Rows,
        input: &[W],
        padded: Option<&[u8]>,
        out: &mut [MaybeUninit<W>],
    ) -> Result<(), GatherError> {
        let n = out.len();
        let chunk = self.chunk_len(n, 1, size_of::<W>());
        let level = self.options.gather_level();
        let run = |i: usize, part: &mut [MaybeUninit<W>]| {
            rows.run(input, padded, level, self.indices, i * chunk, part)
        };
        let done = par::for_each_chunk(self.workers, out, chunk, run);
        if done.iter().all(|ok| *ok == Some(true)) {
            Ok(())
        } else {
            Err(self.first_bad_index())
        }
    }

    /// A staged column gather ([`staged`]): one range of column tiles per thread, so each
    /// thread stages only its own columns.
    fn run_staged<W: Word>(
        &self,
        columns: &staged::Columns,
        input: &[W],
        out: &mut [MaybeUninit<W>],
    ) -> Result<(), GatherError> {
        let tiles = columns.tiles();
        let serial = self.chunk_len(out.len(), 1, size_of::<W>()) >= out.len();
        let tasks = if serial {
            1
        } else {
            self.workers.threads().min(tiles)
        };
        let out = staged::Columnar::new(out);
        let run = |k: usize| {
            let range = tiles * k / tasks..tiles * (k + 1) / tasks;
            columns.run(
                input,
                self.indices,
                range,
                &out,
                staged::Levels {
                    vector: self.options.vector_level(),
                    gather: self.options.gather_level(),
                },
            )
        };
        let ok = if tasks == 1 {
            run(0)
        } else {
            // Counts the tasks that ran to their end without a bad index: a host may also leave
            // a task unrun (a panic it caught), which must not pass for success.
            let passed = std::sync::atomic::AtomicUsize::new(0);
            self.workers.run(tasks, &|k| {
                if run(k) {
                    passed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
            passed.into_inner() == tasks
        };
        if ok {
            Ok(())
        } else {
            Err(self.first_bad_index())
        }
    }

    /// The error for the first bad index in row-major order, found with the pre-pass (for
    /// kernels that validate indices in another order).
    #[cold]
    fn first_bad_index(&self) -> GatherError {
        let count = self.layout.t.count;
        let mut tile = vec![0u64; TILE];
        let mut p = 0;
        while p < count {
            let n = TILE.min(count - p);
            let level = self.options.vector_level();
            if let Err(bad) = self.layout.t.fill(self.indices, p, &mut tile[..n], level) {
                return self.error(Stop::Bad(bad));
            }
            p += n;
        }
        internal("a kernel reported a bad index that the pre-pass did not find")
    }

    /// Builds the whole offset table (in parallel when it is large).
    fn build_table<O: Offset>(&self) -> Result<Table<O>, GatherError> {
        let count = self.layout.t.count;
        let mut t = try_vec(count, O::default())?;
        let chunk = self.chunk_len(count, 1, 8);
        let fill = |i: usize, part: &mut [O]| {
            self.layout
                .t
                .fill(self.indices, i * chunk, part, self.options.vector_level())
                .map_err(Stop::Bad)
        };
        let mut max = None;
        let mut first_error = None;
        for r in par::for_each_chunk(self.workers, &mut t, chunk, fill) {
            match r {
                Some(Ok(m)) => max = max.max(m),
                Some(Err(stop)) => first_error = first_error.or(Some(stop)),
                None => return Err(internal("a task of the index pre-pass did not run")),
            }
        }
        if let Some(stop) = first_error {
            return Err(self.error(stop));
        }
        let simd = self.check_bound(max).map_err(|s| self.error(s))?;
        Ok(Table::Built { t, simd })
    }

    /// Whether the largest offset keeps every read inside the input (else `Stop::Bound`), and
    /// whether the hardware gathers may be used: the offsets fit their 32-bit lanes and their
    /// 4-byte loads stay inside the input's buffer.
    fn check_bound(&self, max: Option<usize>) -> Result<bool, Stop> {
        match max {
            None => Ok(true),
            Some(m) => match m.checked_add(self.layout.max_base) {
                Some(top) if top < self.layout.n_in => {
                    Ok(m <= i32::MAX as usize && top + self.overhang < self.layout.n_in)
                }
                _ => Err(Stop::Bound),
            },
        }
    }

    /// Output elements per chunk: a multiple of `align`, at least a grain, at most all of them.
    fn chunk_len(&self, n: usize, align: usize, element_bytes: usize) -> usize {
        let threads = self.workers.threads();
        let grain = self.options.grain_bytes.max(1);
        let total = n.saturating_mul(element_bytes);
        if threads <= 1 || total < 2 * grain {
            return n.max(1);
        }
        let per_task = n
            .div_ceil(threads * 4)
            .max(grain / element_bytes.max(1))
            .max(1);
        per_task
            .div_ceil(align)
            .saturating_mul(align)
            .min(n.div_ceil(align) * align)
    }

    /// Runs the output loop over chunks of `out`, where `items_per_8` items of `out` hold 8
    /// output elements (8 for one item per element, `bits` for packed bytes).
    fn execute<'o, O: Offset, U: Send, S: RowSink<O>>(
        &self,
        table: &Table<O>,
        out: &'o mut [U],
        items_per_8: usize,
        element_bytes: usize,
        make: impl Fn(&'o mut [U]) -> S + Sync,
        finish: impl Fn(S) + Sync,
    ) -> Result<(), GatherError> {
        let n = self.layout.n_out;
        let mut align = 8;
        if let Table::Streamed = table {
            align = lcm(8, self.layout.block);
        }
        let chunk = self.chunk_len(n, align, element_bytes.max(1));
        let process = |i: usize, items: &'o mut [U]| -> Result<(), Stop> {
            let e0 = i * chunk;
            let e1 = (e0 + chunk).min(n);
            let mut sink = make(items);
            let mut coord = Vec::new();
            match table {
                Table::Built { t, simd } => {
                    sink.allow_simd(*simd);
                    drive(&self.layout.dims, e0, e1, t, 0, &mut coord, &mut sink);
                }
                Table::Streamed => self.stream(e0, e1, &mut coord, &mut sink)?,
            }
            finish(sink);
            Ok(())
        };
        let items = chunk.div_ceil(8).saturating_mul(items_per_8);
        let mut result = Ok(());
        for r in par::for_each_chunk(self.workers, out, items, process) {
            let r = r.ok_or_else(|| internal("a task of the gather did not run"))?;
            result = match (result, r) {
                (Err(Stop::Bad(x)), Err(Stop::Bad(y))) => {
                    Err(Stop::Bad(if x.flat <= y.flat { x } else { y }))
                }
                (Err(x), _) | (Ok(()), Err(x)) => Err(x),
                (Ok(()), Ok(())) => Ok(()),
            };
        }
        result.map_err(|stop| self.error(stop))
    }

    /// Output elements `e0..e1` with the offset table built tile by tile (`e0` is a multiple of
    /// the block).
    fn stream<O: Offset, S: RowSink<O>>(
        &self,
        e0: usize,
        e1: usize,
        coord: &mut Vec<usize>,
        sink: &mut S,
    ) -> Result<(), Stop> {
        let block = self.layout.block;
        let mut tile = [O::default(); TILE];
        let mut p = e0 / block;
        let end = e1.div_ceil(block);
        while p < end {
            let n = TILE.min(end - p);
            let part = &mut tile[..n];
            let max = self
                .layout
                .t
                .fill(self.indices, p, part, self.options.vector_level())
                .map_err(Stop::Bad)?;
            sink.allow_simd(self.check_bound(max)?);
            drive(
                &self.layout.dims,
                (p * block).max(e0),
                ((p + n) * block).min(e1),
                part,
                p,
                coord,
                sink,
            );
            p += n;
        }
        Ok(())
    }

    fn error(&self, stop: Stop) -> GatherError {
        match stop {
            Stop::Bound => internal("an offset escaped the input"),
            Stop::Bad(bad) => {
                let axis = self.spec.axes.get(bad.component).copied().unwrap_or(0);
                GatherError::IndexOutOfRange {
                    position: unravel(bad.flat, self.indices_shape),
                    axis,
                    value: bad.value,
                    dim: self.input_shape.get(axis).copied().unwrap_or(0),
                }
            }
        }
    }
}

/// Elements past an element that a hardware gather of `dtype` reads (see [`Call::overhang`]).
fn overhang(dtype: DataType) -> usize {
    match dtype.byte_size() {
        Some(b @ 1..4) => 4usize.div_ceil(b) - 1,
        _ => 0,
    }
}

fn internal(reason: &'static str) -> GatherError {
    GatherError::Internal { reason }
}

fn lcm(a: usize, b: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    a / gcd(a, b) * b
}

/// The byte buffer as elements of `W`, if its address and length fit.
fn cast_uninit<W: Word>(bytes: &mut [MaybeUninit<u8>]) -> Option<&mut [MaybeUninit<W>]> {
    let size = size_of::<W>();
    let aligned = (bytes.as_ptr() as usize).is_multiple_of(align_of::<W>());
    if !aligned || !bytes.len().is_multiple_of(size) {
        return None;
    }
    // SAFETY: the pointer is aligned for `W`, the length is a whole number of `W`, the lifetime
    // and exclusivity carry over, and `MaybeUninit` has no validity requirement.
    Some(unsafe {
        std::slice::from_raw_parts_mut(
            bytes.as_mut_ptr().cast::<MaybeUninit<W>>(),
            bytes.len() / size,
        )
    })
}

#[cfg(test)]
mod tests {
    //! The paths that only large or unusual calls take (staged columns, software prefetch,
    //! multi-coordinate 32-bit pre-pass), against the reference kernel, serial and on two
    //! threads. The property tests cover small calls of every shape.

    use super::*;
    use crate::gather::reference;

    /// SplitMix64 values.
    fn values(seed: u64, n: usize) -> impl Iterator<Item = u64> {
        (0..n as u64).map(move |i| {
            let mut z = seed.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
    }

    fn data(shape: &[usize]) -> Tensor {
        data_of(DataType::Float, shape)
    }

    /// Random elements of `dtype` (a whole-byte type).
    fn data_of(dtype: DataType, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let bytes: Vec<u8> = values(1, n * dtype.bits() / 8).map(|v| v as u8).collect();
        Tensor::from_bytes(dtype, shape, &bytes).unwrap()
    }

    /// Index values uniform in `[-d, d)` (negative ones count from the end) for coordinate `k`
    /// of each tuple, with `dims[k % len] = d`.
    fn indices(shape: &[usize], dims: &[usize], int32: bool) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<i64> = values(2, n)
            .enumerate()
            .map(|(i, r)| {
                let d = dims[i % dims.len()] as i64;
                (r % (2 * d as u64)) as i64 - d
            })
            .collect();
        if int32 {
            let v = v.into_iter().map(|x| x as i32).collect();
            Tensor::from_vec(DataType::Int32, shape, v).unwrap()
        } else {
            Tensor::from_vec(DataType::Int64, shape, v).unwrap()
        }
    }

    fn with_value(t: &Tensor, at: usize, value: i64) -> Tensor {
        let mut t = t.clone();
        match t.dtype() {
            DataType::Int32 => t.as_slice_mut::<i32>().unwrap()[at] = value as i32,
            _ => t.as_slice_mut::<i64>().unwrap()[at] = value,
        }
        t
    }

    /// The fast kernel, serial and on two threads, gives the reference's result or error.
    fn check(input: &Tensor, indices: &Tensor, spec: &GatherSpec) {
        let want = reference::gather_multiaxis(input, indices, spec);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let threaded = FastOptions {
            grain_bytes: 4096,
            ..FastOptions::default()
        };
        for options in [FastOptions::serial(), threaded] {
            for level in [SimdLevel::Scalar, SimdLevel::detected()] {
                let options = options.clone().with_simd(level);
                let got = pool.install(|| gather_multiaxis_with(input, indices, spec, &options));
                assert_eq!(
                    got,
                    want,
                    "{:?} {:?} {spec:?} {options:?}",
                    input.shape(),
                    indices.shape()
                );
            }
        }
        if input.dtype() != DataType::String {
            check_borrowed(input, indices, spec, &want);
        }
    }

    /// A host pool that runs the tasks last to first on the calling thread.
    struct Backwards;

    impl Workers for Backwards {
        fn threads(&self) -> usize {
            3
        }

        fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
            (0..tasks).rev().for_each(task)
        }
    }

    /// The borrowed-buffer entry on an input without slack after its payload, its tasks run by
    /// a host pool, gives the same bytes or error.
    fn check_borrowed(
        input: &Tensor,
        indices: &Tensor,
        spec: &GatherSpec,
        want: &Result<Tensor, GatherError>,
    ) {
        let payload = input.as_bytes().unwrap();
        // An aligned copy of exactly the payload's bytes.
        let mut words = vec![0u64; payload.len().div_ceil(8)];
        let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..payload.len()];
        bytes.copy_from_slice(payload);
        let raw = RawTensor {
            dtype: input.dtype(),
            bytes,
            shape: input.shape(),
        };
        let values = match indices.dtype() {
            DataType::Int32 => Indices::I32(indices.as_slice().unwrap()),
            _ => Indices::I64(indices.as_slice().unwrap()),
        };
        let shape = crate::gather::output_shape(input.shape(), indices.shape(), spec).unwrap();
        let n = input.dtype().storage_bytes(shape.iter().product()).unwrap();
        let mut out = vec![MaybeUninit::new(0u8); n];
        let options = FastOptions {
            grain_bytes: 4096,
            ..FastOptions::default()
        };
        let got = gather_multiaxis_into_on(
            &Backwards,
            raw,
            values,
            indices.shape(),
            spec,
            &options,
            &mut out,
        );
        match want {
            Ok(t) => {
                assert_eq!(got, Ok(()));
                // SAFETY: the call succeeded, so it wrote every byte.
                let out: Vec<u8> = out.iter().map(|b| unsafe { b.assume_init() }).collect();
                assert_eq!(out, t.as_bytes().unwrap(), "{:?}", input.shape());
            }
            Err(e) => assert_eq!(got.as_ref().err(), Some(e)),
        }
    }

    /// The canonical form of a call, for checking which path it takes.
    fn layout(input: &Tensor, indices: &Tensor, spec: &GatherSpec) -> Layout {
        let out = crate::gather::output_shape(input.shape(), indices.shape(), spec).unwrap();
        Layout::new(input.shape(), indices.shape(), spec, &out).unwrap()
    }

    #[test]
    fn staged_columns_match_the_reference() {
        // Two outer positions, rows of 1100 (a partial last tile), 8 KiB between coordinates.
        let input = data(&[2, 1024, 1100]);
        let spec = GatherSpec::new(vec![1]);
        for int32 in [false, true] {
            let idx = indices(&[2, 300, 1100], &[1024], int32);
            assert!(staged::Columns::new(&layout(&input, &idx, &spec), 4).is_some());
            check(&input, &idx, &spec);
            // The first bad index in row-major order, whichever tile meets one first.
            let bad = with_value(&with_value(&idx, 500_000, 1024), 2_000, -1025);
            check(&input, &bad, &spec);
            check(&input, &with_value(&idx, 659_999, 5000), &spec);
            let clamp = spec.clone().with_mode(OutOfRange::Clamp);
            check(&input, &with_value(&bad, 7, i64::from(i32::MIN)), &clamp);
        }
        // Mode zero is not staged.
        let idx = indices(&[2, 300, 1100], &[1024], false);
        let zero = spec.clone().with_mode(OutOfRange::Zero);
        assert!(staged::Columns::new(&layout(&input, &idx, &zero), 4).is_none());
    }

    #[test]
    fn staged_columns_of_every_width_match_the_reference() {
        // 1-, 2- and 8-byte elements (the hardware column gathers load 1- and 2-byte ones as
        // 4 bytes, so the stage's last cells test its slack); widths that leave a partial tile
        // and a tail of fewer than 16 columns; a bad index inside a whole vector.
        for (dtype, width) in [
            (DataType::Uint8, 8200),
            (DataType::Float16, 4100),
            (DataType::Double, 1030),
        ] {
            let input = data_of(dtype, &[1024, width]);
            let spec = GatherSpec::new(vec![0]);
            let idx = indices(&[128, width], &[1024], true);
            let element = dtype.bits() / 8;
            assert!(staged::Columns::new(&layout(&input, &idx, &spec), element).is_some());
            check(&input, &idx, &spec);
            check(&input, &with_value(&idx, 3 * width + 5, 1024), &spec);
            let clamp = spec.clone().with_mode(OutOfRange::Clamp);
            check(&input, &with_value(&idx, width - 1, -4000), &clamp);
        }
    }

    #[test]
    fn rowwise_gathers_match_the_reference() {
        // GatherElements along the last axis, with two outer dimensions and runs of 300 that
        // chunk boundaries cut.
        let input = data(&[3, 70, 200]);
        let spec = GatherSpec::new(vec![2]);
        for int32 in [false, true] {
            let idx = indices(&[3, 70, 300], &[200], int32);
            assert!(rowwise::Rows::new(&layout(&input, &idx, &spec), 4).is_some());
            check(&input, &idx, &spec);
            let bad = with_value(&with_value(&idx, 50_000, 200), 30_001, -201);
            check(&input, &bad, &spec);
            let clamp = spec.clone().with_mode(OutOfRange::Clamp);
            check(&input, &with_value(&bad, 7, i64::from(i32::MAX)), &clamp);
        }
        // Every element width, the last row ending at the input's last byte (1- and 2-byte
        // elements are loaded as 4 bytes), runs of 37 (two vectors of 16 and a tail), a bad
        // index in a vector and in a tail.
        for dtype in [
            DataType::Uint8,
            DataType::Float16,
            DataType::Float,
            DataType::Double,
        ] {
            let input = data_of(dtype, &[5, 8, 33]);
            for int32 in [false, true] {
                let idx = indices(&[5, 8, 37], &[33], int32);
                assert!(rowwise::Rows::new(&layout(&input, &idx, &spec), 8).is_some());
                check(&input, &idx, &spec);
                check(&input, &with_value(&idx, 1000, 33), &spec);
                check(&input, &with_value(&idx, 1479, -34), &spec);
                let clamp = spec.clone().with_mode(OutOfRange::Clamp);
                check(&input, &with_value(&idx, 1000, -1_000_000), &clamp);
                check(&input, &with_value(&idx, 1479, i64::from(i32::MAX)), &clamp);
            }
        }
        // Rows too long to prefetch once per run are left to the general loops.
        let idx = indices(&[3, 70, 2], &[200], false);
        assert!(rowwise::Rows::new(&layout(&input, &idx, &spec), 4).is_none());
        check(&input, &idx, &spec);
    }

    /// A host pool that never runs the last task (as if it caught a panic there).
    struct Dropping;

    impl Workers for Dropping {
        fn threads(&self) -> usize {
            2
        }

        fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
            (0..tasks.saturating_sub(1)).for_each(task)
        }
    }

    #[test]
    fn a_task_the_host_did_not_run_is_an_error() {
        // Staged columns, row-wise, and the general loops with their table built in chunks.
        let calls = [
            (data(&[2, 1024, 1100]), vec![2, 300, 1100], 1),
            (data(&[3, 70, 200]), vec![3, 70, 300], 2),
            (data(&[64, 300]), vec![200, 300], 0),
        ];
        for (input, shape, axis) in calls {
            let idx = indices(&shape, &[input.shape()[axis]], false);
            let spec = GatherSpec::new(vec![axis]);
            let raw = RawTensor {
                dtype: input.dtype(),
                bytes: input.as_bytes().unwrap(),
                shape: input.shape(),
            };
            let out_shape = crate::gather::output_shape(input.shape(), &shape, &spec).unwrap();
            let mut out = vec![MaybeUninit::new(0u8); 4 * out_shape.iter().product::<usize>()];
            let options = FastOptions {
                grain_bytes: 4096,
                ..FastOptions::default()
            };
            let values = Indices::I64(idx.as_slice().unwrap());
            let got =
                gather_multiaxis_into_on(&Dropping, raw, values, &shape, &spec, &options, &mut out);
            assert!(
                matches!(got, Err(GatherError::Internal { .. })),
                "{shape:?}: {got:?}"
            );
        }
    }

    #[test]
    fn narrow_element_gathers_match_the_reference() {
        // GatherElements along axis 0 and Gather along the last axis of 1- and 2-byte elements,
        // whose hardware gathers load 4 bytes: reads of the input's last elements (index -1)
        // included, so on a buffer without slack the last tiles fall back to the scalar loop.
        for dtype in [DataType::Uint8, DataType::Float16] {
            let input = data_of(dtype, &[64, 33]);
            for int32 in [false, true] {
                let along_0 = with_value(&indices(&[50, 33], &[64], int32), 50 * 33 - 1, -1);
                check(&input, &along_0, &GatherSpec::new(vec![0]));
                let last = with_value(&indices(&[1, 700], &[33], int32), 699, -1);
                check(&input, &last, &GatherSpec::new(vec![1]));
            }
        }
    }

    #[test]
    fn prefetched_gathers_match_the_reference() {
        // Element gathers from a 9 MiB input (GatherElements along the last axis).
        let input = data(&[2048, 1152]);
        let spec = GatherSpec::new(vec![1]);
        let idx = indices(&[2048, 64], &[1152], false);
        check(&input, &idx, &spec);
        check(&input, &with_value(&idx, 70_000, -1153), &spec);
        // Block rows of 1 KiB (an embedding lookup), and rows of 40 bytes.
        let rows = data(&[9000, 256]);
        check(
            &rows,
            &indices(&[5000, 1], &[9000], false),
            &GatherSpec::new(vec![0]),
        );
        let narrow = data(&[230_000, 10]);
        let idx = indices(&[3000, 1], &[230_000], true);
        check(&narrow, &idx, &GatherSpec::new(vec![0]));
        check(
            &narrow,
            &with_value(&idx, 2999, 230_000),
            &GatherSpec::new(vec![0]),
        );
    }

    #[test]
    fn wide_block_rows_match_the_reference() {
        // Runs of block rows of at least 128 bytes: rows of 200 bytes (three 64-byte vectors
        // and a tail) into a small output, and rows of 1 KiB into an output large enough for
        // the non-temporal stores on one thread on every CPU; at the detected level and,
        // scalar, through `memcpy`.
        let spec = GatherSpec::new(vec![0]);
        let rows = data(&[3000, 50]);
        check(&rows, &indices(&[2000, 1], &[3000], false), &spec);
        let table = data(&[11000, 256]);
        const { assert!(10500 * 1024 >= STREAM_MIN_BYTES_ZEN5) };
        let idx = indices(&[10500, 1], &[11000], true);
        check(&table, &idx, &spec);
        check(&table, &with_value(&idx, 10000, 11000), &spec);
    }

    #[test]
    fn multi_coordinate_tuples_match_the_reference() {
        // (input shape, indices shape, axes): GatherND rows, points with 2 and 3 coordinates.
        let calls: [(&[usize], &[usize], &[usize]); 3] = [
            (&[37, 64, 16], &[5000, 1, 2], &[0, 1]),
            (&[37, 64], &[5000, 2], &[1, 0]),
            (&[37, 64, 16], &[5000, 1, 3], &[2, 0, 1]),
        ];
        for (input_shape, indices_shape, axes) in calls {
            let input = data(input_shape);
            let dims: Vec<usize> = axes.iter().map(|&a| input_shape[a]).collect();
            let idx = indices(indices_shape, &dims, false);
            let spec = GatherSpec::new(axes.to_vec());
            check(&input, &idx, &spec);
            check(&input, &with_value(&idx, 4001, -100), &spec);
            let clamp = spec.clone().with_mode(OutOfRange::Clamp);
            check(&input, &with_value(&idx, 4001, 1 << 40), &clamp);
        }
    }
}
