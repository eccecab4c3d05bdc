//! The `GatherMultiaxis` kernel as onnxruntime sees it: attributes read once when the session
//! creates the kernel, then one `compute` per run.
//!
//! Messages are the interpreter's: `node 'NAME' (multigather.GatherMultiaxis): REASON`, or
//! `node producing 'OUTPUT' (...)` for a node without a name, where REASON is the text of the
//! library's `GatherError`.

use std::mem::MaybeUninit;
use std::sync::OnceLock;

use multigather_kernel::gather::fast::{gather_multiaxis_into_on, Indices, RawTensor};
use multigather_kernel::gather::{
    gather_multiaxis_with, node_label, output_shape, FastOptions, GatherError, GatherSpec,
    MultiaxisAttributes, DOMAIN, OP_TYPE,
};
use multigather_kernel::{DataType, Tensor};
use ort_sys::{OrtKernelContext, OrtKernelInfo, OrtValue};

use crate::ffi::{data_type, Api, Found, Result, Status};

/// One node's kernel.
pub struct Kernel {
    api: Api,
    /// How messages name the node: `'name'` or `producing 'output'`.
    label: String,
    /// The attributes, checked when the session creates the kernel; `axes` are normalised per
    /// call, against the input's rank.
    attrs: MultiaxisAttributes,
}

impl Kernel {
    /// Reads the node's attributes; a missing `axes` or an unknown `mode` is an error now, when
    /// the session is created.
    pub fn new(api: Api, info: *const OrtKernelInfo) -> Result<Kernel> {
        let name = api.node_name(info).unwrap_or_default();
        let output = match name.as_str() {
            "" => api.output_name(info, 0).unwrap_or_default(),
            _ => String::new(),
        };
        let label = node_label(&name, Some(&output));
        let fail =
            |reason: String| api.error(&format!("node {label} ({DOMAIN}.{OP_TYPE}): {reason}"));
        let (axes, mode) = (api.attribute(info, "axes"), api.attribute(info, "mode"));
        let attrs = MultiaxisAttributes::parse(
            axes.as_ref().map(Found::raw),
            mode.as_ref().map(Found::raw),
        )
        .map_err(|e| fail(e.to_string()))?;
        Ok(Kernel { api, label, attrs })
    }

    /// The status for a panic caught at the C boundary (a bug: nothing a model does panics).
    pub fn internal_error(&self) -> Status {
        self.error("internal error in the GatherMultiaxis kernel")
    }

    /// An error of this node, worded as the interpreter words it.
    fn error(&self, reason: impl std::fmt::Display) -> Status {
        self.api.error(&format!(
            "node {} ({DOMAIN}.{OP_TYPE}): {reason}",
            self.label
        ))
    }

    /// One run: reads the operands, allocates the output with the shape rule's shape, gathers.
    pub fn compute(&self, ctx: *mut OrtKernelContext) -> Result<()> {
        let api = self.api;
        let (data, indices) = (api.input(ctx, 0)?, api.input(ctx, 1)?);
        let (data_code, data_shape) = api.type_and_shape(data)?;
        let (index_code, index_shape) = api.type_and_shape(indices)?;
        let dtype = data_type(data_code)
            .ok_or_else(|| self.error(format!("element type {data_code} is not supported")))?;
        let index_type = data_type(index_code)
            .filter(|t| t.is_index())
            .ok_or_else(|| {
                self.error(GatherError::IndicesType {
                    dtype: data_type(index_code).unwrap_or(DataType::Float),
                })
            })?;
        let spec = self
            .attrs
            .spec(data_shape.len())
            .map_err(|e| self.error(e))?;
        let out_shape =
            output_shape(&data_shape, &index_shape, &spec).map_err(|e| self.error(e))?;
        let out = api.output(ctx, 0, &out_shape)?;
        let n_out: usize = out_shape.iter().product();
        let n_in: usize = data_shape.iter().product();
        let n_idx: usize = index_shape.iter().product();
        if n_out == 0 {
            return Ok(());
        }
        // Index values: typed views of onnxruntime's buffer (copied only if misaligned).
        let index_ptr = api.data(indices)?;
        let copied_i32;
        let copied_i64;
        let values = if index_type == DataType::Int32 {
            copied_i32 = typed::<i32>(index_ptr, n_idx);
            Indices::I32(&copied_i32)
        } else {
            copied_i64 = typed::<i64>(index_ptr, n_idx);
            Indices::I64(&copied_i64)
        };
        if dtype == DataType::String {
            return self.compute_strings(data, n_in, &data_shape, values, &index_shape, &spec, out);
        }
        let in_bytes = storage(dtype, n_in);
        let out_bytes = storage(dtype, n_out);
        let align = dtype.byte_size().unwrap_or(1).min(8);
        let data_ptr = api.data(data)?;
        let input_bytes = if in_bytes == 0 {
            // An empty input (gathered along a zero-sized axis in mode "zero") may have no
            // buffer at all: onnxruntime hands out a null pointer. The kernel gets an empty
            // slice aligned for any element type.
            bytemuck_bytes(&[])
        } else {
            // SAFETY: onnxruntime's tensor holds `in_bytes` bytes of elements (packed for
            // sub-byte types), at a non-null address, and outlives this call.
            unsafe { std::slice::from_raw_parts(data_ptr.cast_const(), in_bytes) }
        };
        let aligned_copy;
        let input_bytes = if (data_ptr as usize).is_multiple_of(align) {
            input_bytes
        } else {
            aligned_copy = aligned(input_bytes);
            &bytemuck_bytes(&aligned_copy)[..in_bytes]
        };
        let out_ptr = api.data(out)?;
        if !(out_ptr as usize).is_multiple_of(align) {
            return Err(self.error("onnxruntime allocated a misaligned output"));
        }
        let input = RawTensor {
            dtype,
            bytes: input_bytes,
            shape: &data_shape,
        };
        let out_ptr = out_ptr.cast::<MaybeUninit<u8>>();
        // SAFETY: onnxruntime's output holds `out_bytes` bytes (the shape rule's shape) for this
        // call alone.
        let out = unsafe { std::slice::from_raw_parts_mut(out_ptr, out_bytes) };
        let workers = Workers { api, ctx };
        let options = FastOptions::default();
        gather_multiaxis_into_on(&workers, input, values, &index_shape, &spec, &options, out)
            .map_err(|e| self.error(e))
    }

    /// `string` elements: onnxruntime keeps them as C++ strings, so they are copied into a
    /// tensor, gathered, and copied out.
    #[allow(clippy::too_many_arguments)]
    fn compute_strings(
        &self,
        data: *const OrtValue,
        n_in: usize,
        data_shape: &[usize],
        values: Indices<'_>,
        index_shape: &[usize],
        spec: &GatherSpec,
        out: *mut OrtValue,
    ) -> Result<()> {
        let strings = self.api.strings(data, n_in)?;
        let input = Tensor::from_strings(data_shape, strings).map_err(|e| self.error(e))?;
        let indices = match values {
            Indices::I32(v) => Tensor::from_vec(DataType::Int32, index_shape, v.to_vec()),
            Indices::I64(v) => Tensor::from_vec(DataType::Int64, index_shape, v.to_vec()),
        }
        .map_err(|e| self.error(e))?;
        let output = gather_multiaxis_with(&input, &indices, spec, &FastOptions::serial())
            .map_err(|e| self.error(e))?;
        let strings = output.as_strings().map_err(|e| self.error(e))?;
        self.api.fill_strings(out, strings)
    }
}

/// The session's intra-op thread pool, as the kernel's workers.
///
/// onnxruntime does not tell a kernel how many threads its pool has, so the work is cut for the
/// machine's cores; a pool of fewer threads (one, with `intra_op_num_threads = 1`: the calling
/// thread) runs the same tasks.
struct Workers {
    api: Api,
    ctx: *mut OrtKernelContext,
}

// SAFETY: the context is only used by `run`, which the kernel calls from the thread that called
// `compute` (see `multigather_kernel::par::Workers`), never from inside a task.
unsafe impl Sync for Workers {}

impl multigather_kernel::par::Workers for Workers {
    fn threads(&self) -> usize {
        static CORES: OnceLock<usize> = OnceLock::new();
        *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        // A failed handoff leaves tasks unrun, which the kernel reports as an internal error.
        let _ = self.api.parallel_for(self.ctx, tasks, &task);
    }
}

/// Bytes of `n` elements of `dtype` (fixed-width or packed).
fn storage(dtype: DataType, n: usize) -> usize {
    dtype.storage_bytes(n).unwrap_or(0)
}

/// `n` values of `T` at `ptr`, borrowed when aligned, else copied.
fn typed<'a, T: Copy + Default>(ptr: *const u8, n: usize) -> std::borrow::Cow<'a, [T]>
where
    [T]: ToOwned<Owned = Vec<T>>,
{
    if n == 0 {
        return std::borrow::Cow::Owned(Vec::new());
    }
    if (ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
        // SAFETY: onnxruntime's index tensor holds `n` values of `T` and outlives the call.
        std::borrow::Cow::Borrowed(unsafe { std::slice::from_raw_parts(ptr.cast::<T>(), n) })
    } else {
        let mut v = vec![T::default(); n];
        // SAFETY: `n * size_of::<T>()` bytes are readable at `ptr`; `v` has room for them.
        unsafe {
            std::ptr::copy_nonoverlapping(ptr, v.as_mut_ptr().cast::<u8>(), n * size_of::<T>())
        };
        std::borrow::Cow::Owned(v)
    }
}

/// The bytes in an 8-byte aligned buffer.
fn aligned(bytes: &[u8]) -> Vec<u64> {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    for (i, chunk) in bytes.chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        words[i] = u64::from_le_bytes(word);
    }
    words
}

fn bytemuck_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: any `u64` is 8 initialised bytes, and `u8` has alignment 1.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) }
}
