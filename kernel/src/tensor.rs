//! The runtime tensor: an element type, a shape and the elements, held in memory.
//!
//! Why one file: `Tensor` and `UninitTensor` share the private buffer whose invariants (length,
//! slack, packed padding) only this file upholds; the arena and packed types are in `tensor/`.
//!
//! [`Tensor`] is what kernels read and write and what the interpreter passes between nodes. It
//! has two representations:
//!
//! - every fixed-width and packed element type lives in one **byte buffer** backed by `u64`
//!   words, so the buffer is 8-byte aligned and typed views ([`Tensor::as_slice`]) are free casts;
//! - `string` tensors hold one byte string per element (ONNX strings are bytes, not UTF-8).
//!
//! Invariants of the byte buffer (relied on by the kernels in `gather::fast`):
//!
//! - it holds exactly `dtype.storage_bytes(len)` bytes of elements, followed by at least 8 bytes
//!   of zeroed slack inside the same allocation, so a vector load that starts at the last element
//!   never leaves the allocation;
//! - the padding bits of a packed type's last byte are zero whenever the tensor was built by this
//!   module or a kernel (equality masks them anyway, since `as_bytes_mut` can set them).
//!
//! Equality is **bitwise**: two float tensors holding the same NaN bit pattern are equal, and
//! `0.0 != -0.0`. Rewrites are verified bit for bit, so this is the equality we want.
//!
//! Kernels that write every output element allocate with [`Tensor::uninit`], which skips the
//! zero-fill; the one `unsafe` step, [`UninitTensor::assume_init`], is the kernel's promise that
//! it wrote every byte.

mod arena;
pub mod packed;

pub use arena::{
    default_budget, try_to_vec, try_vec, try_with_capacity, Arena, Scratch, WorkerArena,
};

use std::fmt;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::sync::Arc;

use bytemuck::Pod;
use thiserror::Error;

use crate::DataType;

/// What went wrong building, viewing or reshaping a [`Tensor`].
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TensorError {
    /// The shape is not addressable: a dim or the product of the non-zero dims is beyond 2^63-1
    /// (see [`element_count`]), or the byte size overflows.
    #[error("shape {shape:?} of {dtype} is too large to address")]
    TooLarge { dtype: DataType, shape: Vec<usize> },
    /// The memory for a tensor could not be allocated.
    #[error("out of memory for a tensor of {bytes} bytes")]
    OutOfMemory { bytes: usize },
    /// A buffer that would take the memory in use past the budget (see [`Arena`]).
    #[error(
        "{} ({bytes} bytes) more would exceed the memory budget of {} ({} in use); raise it with --max-memory",
        human_bytes(*bytes),
        human_bytes(*limit),
        human_bytes(*live)
    )]
    OverBudget {
        bytes: usize,
        live: usize,
        limit: usize,
    },
    /// The number of elements given does not match the shape.
    #[error("shape {shape:?} holds {expected} elements but {actual} were given")]
    ElementCount {
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },
    /// The number of bytes given does not match the shape and element type.
    #[error("{expected} bytes of {dtype} needed for shape {shape:?} but {actual} were given")]
    ByteLength {
        dtype: DataType,
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },
    /// A typed view or constructor used a Rust type of the wrong width for the element type.
    #[error("{dtype} elements cannot be viewed as {width}-byte values")]
    ElementWidth { dtype: DataType, width: usize },
    /// A byte operation on a string tensor, or a string operation on a byte tensor.
    #[error("operation needs a {wanted} tensor, this one is {dtype}")]
    Representation {
        dtype: DataType,
        wanted: &'static str,
    },
    /// A reshape to a shape with a different element count.
    #[error("cannot reshape {from:?} ({from_len} elements) to {to:?} ({to_len} elements)")]
    Reshape {
        from: Vec<usize>,
        from_len: usize,
        to: Vec<usize>,
        to_len: usize,
    },
    /// A typed view whose Rust type needs more than the buffer's 8-byte alignment.
    #[error("{dtype} buffer cannot be viewed as a type aligned to {align} bytes")]
    Alignment { dtype: DataType, align: usize },
    /// An element index past the end of the tensor.
    #[error("element {index} is out of bounds for a tensor of {len} elements")]
    OutOfBounds { index: usize, len: usize },
    /// A crop to a shape of another rank or with a larger dimension.
    #[error("cannot crop shape {from:?} to {to:?}")]
    Crop { from: Vec<usize>, to: Vec<usize> },
    /// An index read from a tensor whose type is not `int32` or `int64`.
    #[error("indices must be int32 or int64, not {dtype}")]
    NotIndex { dtype: DataType },
}

/// A tensor held in memory: element type, shape and elements in row-major order.
///
/// # Example
/// ```
/// use multigather_kernel::{DataType, Tensor};
/// let t = Tensor::from_vec(DataType::Float, &[2, 2], vec![1.0f32, 2.0, 3.0, f32::NAN])?;
/// assert_eq!(t.shape(), &[2, 2]);
/// assert_eq!(t.as_slice::<f32>()?[1], 2.0);
/// // Equality is bitwise, so a NaN tensor equals its copy.
/// assert_eq!(t, t.clone());
/// let t = t.into_shape(&[4])?;
/// assert_eq!(t.len(), 4);
/// # Ok::<(), multigather_kernel::tensor::TensorError>(())
/// ```
#[derive(Clone)]
pub struct Tensor {
    dtype: DataType,
    shape: Vec<usize>,
    len: usize,
    data: Data,
}

/// The elements. Both forms are shared between clones and copied on the first write
/// (`Arc::make_mut`), so cloning a tensor — what a `Reshape`, `Identity` or a graph input costs
/// the interpreter — never copies its payload.
#[derive(Clone)]
enum Data {
    Bytes(ByteBuf),
    Strings(Arc<Vec<Vec<u8>>>),
}

/// An 8-byte aligned byte buffer: `len` bytes of payload followed by zeroed slack words.
#[derive(Clone)]
struct ByteBuf {
    words: Arc<Words>,
    len: usize,
}

/// The words of a buffer taken from an [`Arena`], given back to it when the last tensor
/// sharing them is dropped. Every word is initialised.
struct Words {
    vec: Vec<u64>,
    home: Arc<Arena>,
}

impl Drop for Words {
    fn drop(&mut self) {
        let mut v = ManuallyDrop::new(std::mem::take(&mut self.vec));
        let (ptr, len, cap) = (v.as_mut_ptr(), v.len(), v.capacity());
        // SAFETY: `u64` and `MaybeUninit<u64>` have the same size and alignment, and the vector
        // is re-owned exactly once (the original is not dropped).
        let v = unsafe { Vec::from_raw_parts(ptr.cast::<MaybeUninit<u64>>(), len, cap) };
        self.home.give_back(v);
    }
}

/// Number of `u64` words backing `len` payload bytes: the payload rounded up, plus one slack
/// word, so at least 8 readable bytes follow the payload.
fn words_for(len: usize) -> usize {
    len / 8 + 2
}

/// Words for a payload of `nbytes` bytes from the current arena, with the words the payload
/// does not fully cover (the partial last word and the slack word) zeroed, so that once the
/// `nbytes` payload bytes are written every word is initialised.
fn uninit_words(nbytes: usize) -> Result<(Vec<MaybeUninit<u64>>, Arc<Arena>), TensorError> {
    let home = Arena::current();
    let n = words_for(nbytes);
    let mut words = home.take(n)?;
    // SAFETY: `MaybeUninit<u64>` needs no initialisation and `nbytes / 8 < n <= capacity`.
    unsafe { words.set_len(nbytes / 8) };
    words.resize(n, MaybeUninit::new(0));
    Ok((words, home))
}

/// Re-owns fully initialised words as a buffer.
///
/// # Safety
/// Every word of `words` must be initialised.
unsafe fn finish_words(words: Vec<MaybeUninit<u64>>, home: Arc<Arena>, len: usize) -> ByteBuf {
    let mut words = ManuallyDrop::new(words);
    let (ptr, n, cap) = (words.as_mut_ptr(), words.len(), words.capacity());
    // SAFETY: `MaybeUninit<u64>` and `u64` have the same size and alignment, so the allocation
    // can be re-owned as `Vec<u64>`; the caller promises every word is initialised.
    let vec = unsafe { Vec::from_raw_parts(ptr.cast::<u64>(), n, cap) };
    ByteBuf {
        words: Arc::new(Words { vec, home }),
        len,
    }
}

impl ByteBuf {
    /// A buffer holding a copy of `src`, from the current arena.
    fn copied(src: &[u8]) -> Result<ByteBuf, TensorError> {
        let (mut words, home) = uninit_words(src.len())?;
        // SAFETY: `src.len() <= 8 * words.len()` (see `words_for`), and the fresh words do not
        // overlap `src`.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), words.as_mut_ptr().cast::<u8>(), src.len())
        };
        // SAFETY: the payload bytes were written just now, the rest by `uninit_words`.
        Ok(unsafe { finish_words(words, home, src.len()) })
    }

    fn zeroed(len: usize) -> Result<ByteBuf, TensorError> {
        let (mut words, home) = uninit_words(len)?;
        words.iter_mut().for_each(|w| {
            w.write(0);
        });
        // SAFETY: every word was written just now.
        Ok(unsafe { finish_words(words, home, len) })
    }

    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(self.words.vec.as_slice())[..self.len]
    }

    /// The payload, writable: shared words are copied first (fallibly, from the arena).
    fn bytes_mut(&mut self) -> Result<&mut [u8], TensorError> {
        if Arc::get_mut(&mut self.words).is_none() {
            let copy = ByteBuf::copied(self.padded())?;
            self.words = copy.words;
        }
        // The words are unshared now (a fresh copy has one owner), so this always succeeds.
        let words = Arc::get_mut(&mut self.words).ok_or(TensorError::OutOfMemory { bytes: 0 })?;
        Ok(&mut bytemuck::cast_slice_mut(words.vec.as_mut_slice())[..self.len])
    }

    fn padded(&self) -> &[u8] {
        bytemuck::cast_slice(self.words.vec.as_slice())
    }
}

/// A byte count for people: `4.0 TiB`, `512 B`.
///
/// # Example
/// ```
/// assert_eq!(multigather_kernel::tensor::human_bytes(3 << 40), "3.0 TiB");
/// assert_eq!(multigather_kernel::tensor::human_bytes(1000), "1000 B");
/// ```
pub fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Element count of `shape`, or `None` when the shape is not addressable: when a dim, or the
/// product of the non-zero dims, is beyond 2^63-1 (the largest size ONNX can state).
///
/// The zeros are left out of the product on purpose. onnxruntime refuses a shape whose running
/// product overflows `int64` (`[2^40, 2^36, 0]`), but accepts `[0, 2^40, 2^36]` and then fails
/// in the kernels that compute its strides (Transpose, Gather, Pad, Expand, ...). Refusing both
/// here, in one place, means that every stride and every product of some of a tensor's dims
/// fits in `i64`, in every kernel.
///
/// # Example
/// ```
/// use multigather_kernel::tensor::element_count;
/// assert_eq!(element_count(&[2, 3]), Some(6));
/// assert_eq!(element_count(&[1 << 31, 1 << 31, 0]), Some(0));
/// assert_eq!(element_count(&[1 << 40, 1 << 36, 0]), None);
/// assert_eq!(element_count(&[0, 1 << 40, 1 << 36]), None);
/// assert_eq!(element_count(&[0, 1 << 63]), None);
/// ```
pub fn element_count(shape: &[usize]) -> Option<usize> {
    const LIMIT: usize = i64::MAX as usize;
    let nonzero = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |n, &d| n.checked_mul(d).filter(|&n| n <= LIMIT))?;
    Some(if shape.contains(&0) { 0 } else { nonzero })
}

fn checked_storage(dtype: DataType, shape: &[usize]) -> Result<(usize, usize), TensorError> {
    let too_large = || TensorError::TooLarge {
        dtype,
        shape: shape.to_vec(),
    };
    let len = element_count(shape).ok_or_else(too_large)?;
    if dtype == DataType::String {
        return Ok((len, 0));
    }
    let bytes = dtype.storage_bytes(len).ok_or_else(too_large)?;
    // Keep byte offsets (and the slack words) representable as `isize`.
    if bytes > isize::MAX as usize / 2 {
        return Err(too_large());
    }
    Ok((len, bytes))
}

impl Tensor {
    /// A tensor of `shape` holding `values` in row-major order.
    ///
    /// `T` must be as wide as one element of `dtype` (e.g. `f32`, `u32` or `i32` for `float`,
    /// `half::f16` or `u16` for `float16`, `[f32; 2]` for `complex64`); packed sub-byte types
    /// and strings have their own constructors ([`Tensor::from_bytes`], [`Tensor::from_strings`]).
    pub fn from_vec<T: Pod>(
        dtype: DataType,
        shape: &[usize],
        values: Vec<T>,
    ) -> Result<Tensor, TensorError> {
        check_width::<T>(dtype)?;
        let (len, _) = checked_storage(dtype, shape)?;
        if values.len() != len {
            return Err(TensorError::ElementCount {
                shape: shape.to_vec(),
                expected: len,
                actual: values.len(),
            });
        }
        Tensor::from_bytes(dtype, shape, bytemuck::cast_slice(&values))
    }

    /// A tensor of `shape` whose elements are the raw little-endian `bytes` (packed for sub-byte
    /// types), which must be exactly `dtype.storage_bytes(len)` long.
    ///
    /// Padding bits of a packed type's last byte are cleared.
    pub fn from_bytes(
        dtype: DataType,
        shape: &[usize],
        bytes: &[u8],
    ) -> Result<Tensor, TensorError> {
        if dtype == DataType::String {
            return Err(TensorError::Representation {
                dtype,
                wanted: "fixed-width",
            });
        }
        let (len, nbytes) = checked_storage(dtype, shape)?;
        if bytes.len() != nbytes {
            return Err(TensorError::ByteLength {
                dtype,
                shape: shape.to_vec(),
                expected: nbytes,
                actual: bytes.len(),
            });
        }
        let mut buf = ByteBuf::copied(bytes)?;
        if let Some(last) = buf.bytes_mut()?.last_mut() {
            *last &= !packed::padding_mask(dtype.bits(), len);
        }
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            len,
            data: Data::Bytes(buf),
        })
    }

    /// A `string` tensor of `shape` holding `values` (byte strings) in row-major order.
    pub fn from_strings(shape: &[usize], values: Vec<Vec<u8>>) -> Result<Tensor, TensorError> {
        let (len, _) = checked_storage(DataType::String, shape)?;
        if values.len() != len {
            return Err(TensorError::ElementCount {
                shape: shape.to_vec(),
                expected: len,
                actual: values.len(),
            });
        }
        Ok(Tensor {
            dtype: DataType::String,
            shape: shape.to_vec(),
            len,
            data: Data::Strings(Arc::new(values)),
        })
    }

    /// A tensor of `shape` with every element zero (all bits clear; empty strings).
    pub fn zeros(dtype: DataType, shape: &[usize]) -> Result<Tensor, TensorError> {
        let (len, nbytes) = checked_storage(dtype, shape)?;
        let data = if dtype == DataType::String {
            Data::Strings(Arc::new(arena::try_vec(len, Vec::new())?))
        } else {
            Data::Bytes(ByteBuf::zeroed(nbytes)?)
        };
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            len,
            data,
        })
    }

    /// Checks, without allocating, that a tensor of `dtype` and `shape` is addressable and fits
    /// in the current arena's budget: for callers that build the elements before the tensor.
    pub fn check_size(dtype: DataType, shape: &[usize]) -> Result<(), TensorError> {
        let (len, nbytes) = checked_storage(dtype, shape)?;
        let bytes = if dtype == DataType::String {
            len.saturating_mul(std::mem::size_of::<Vec<u8>>())
        } else {
            nbytes
        };
        Arena::current().check(bytes)
    }

    /// A rank-0 tensor holding `value`.
    pub fn scalar<T: Pod>(dtype: DataType, value: T) -> Result<Tensor, TensorError> {
        Tensor::from_vec(dtype, &[], vec![value])
    }

    /// An output buffer of `shape` that is not zero-filled; see [`UninitTensor`].
    ///
    /// Fails for `string`, whose elements cannot be left uninitialised.
    pub fn uninit(dtype: DataType, shape: &[usize]) -> Result<UninitTensor, TensorError> {
        if dtype == DataType::String {
            return Err(TensorError::Representation {
                dtype,
                wanted: "fixed-width",
            });
        }
        let (len, nbytes) = checked_storage(dtype, shape)?;
        let (words, home) = uninit_words(nbytes)?;
        Ok(UninitTensor {
            dtype,
            shape: shape.to_vec(),
            len,
            nbytes,
            words,
            home: Some(home),
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The dimensions, outermost first; empty for a scalar.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements (the product of the shape, checked when the tensor was built).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements as raw little-endian bytes (packed for sub-byte types).
    pub fn as_bytes(&self) -> Result<&[u8], TensorError> {
        match &self.data {
            Data::Bytes(b) => Ok(b.bytes()),
            Data::Strings(_) => Err(self.not("fixed-width")),
        }
    }

    /// The elements as mutable raw bytes.
    pub fn as_bytes_mut(&mut self) -> Result<&mut [u8], TensorError> {
        let err = self.not("fixed-width");
        match &mut self.data {
            Data::Bytes(b) => b.bytes_mut(),
            Data::Strings(_) => Err(err),
        }
    }

    /// The payload bytes followed by the zeroed slack (at least 8 bytes), for vector loads that
    /// may run past the last element.
    pub(crate) fn padded_bytes(&self) -> Option<&[u8]> {
        match &self.data {
            Data::Bytes(b) => Some(b.padded()),
            Data::Strings(_) => None,
        }
    }

    /// Whether this tensor is the only holder of its payload, so that writing to it
    /// ([`Tensor::as_slice_mut`]) copies nothing.
    ///
    /// # Example
    /// ```
    /// use multigather_kernel::{DataType, Tensor};
    /// let t = Tensor::zeros(DataType::Float, &[4])?;
    /// assert!(t.is_unique());
    /// let view = t.clone();
    /// assert!(!t.is_unique() && !view.is_unique());
    /// # Ok::<(), multigather_kernel::tensor::TensorError>(())
    /// ```
    pub fn is_unique(&self) -> bool {
        match &self.data {
            Data::Bytes(b) => Arc::strong_count(&b.words) == 1 && Arc::weak_count(&b.words) == 0,
            Data::Strings(s) => Arc::strong_count(s) == 1 && Arc::weak_count(s) == 0,
        }
    }

    /// The elements as a typed slice; `T` must be as wide as one element.
    pub fn as_slice<T: Pod>(&self) -> Result<&[T], TensorError> {
        check_width::<T>(self.dtype)?;
        bytemuck::try_cast_slice(self.as_bytes()?).map_err(|_| TensorError::Alignment {
            dtype: self.dtype,
            align: std::mem::align_of::<T>(),
        })
    }

    /// The elements as a mutable typed slice; `T` must be as wide as one element.
    pub fn as_slice_mut<T: Pod>(&mut self) -> Result<&mut [T], TensorError> {
        check_width::<T>(self.dtype)?;
        let dtype = self.dtype;
        bytemuck::try_cast_slice_mut(self.as_bytes_mut()?).map_err(|_| TensorError::Alignment {
            dtype,
            align: std::mem::align_of::<T>(),
        })
    }

    /// A copy of the elements as a typed vector.
    pub fn to_vec<T: Pod>(&self) -> Result<Vec<T>, TensorError> {
        check_width::<T>(self.dtype)?;
        let bytes = self.as_bytes()?;
        Ok(bytes
            .chunks_exact(std::mem::size_of::<T>())
            .map(bytemuck::pod_read_unaligned)
            .collect())
    }

    /// The elements of a `string` tensor.
    pub fn as_strings(&self) -> Result<&[Vec<u8>], TensorError> {
        match &self.data {
            Data::Strings(s) => Ok(s),
            Data::Bytes(_) => Err(self.not("string")),
        }
    }

    /// The elements of a `string` tensor, mutably.
    pub fn as_strings_mut(&mut self) -> Result<&mut [Vec<u8>], TensorError> {
        let err = self.not("string");
        match &mut self.data {
            Data::Strings(s) => Ok(Arc::make_mut(s).as_mut_slice()),
            Data::Bytes(_) => Err(err),
        }
    }

    /// Element `i` (row-major) of an `int32` or `int64` tensor, widened to `i64`.
    pub fn index_at(&self, i: usize) -> Result<i64, TensorError> {
        let out_of_bounds = TensorError::OutOfBounds {
            index: i,
            len: self.len,
        };
        match self.dtype {
            DataType::Int32 => {
                let b = self.as_bytes()?;
                let s = i
                    .checked_mul(4)
                    .and_then(|at| b.get(at..at + 4))
                    .ok_or(out_of_bounds)?;
                Ok(i64::from(i32::from_le_bytes([s[0], s[1], s[2], s[3]])))
            }
            DataType::Int64 => {
                let b = self.as_bytes()?;
                let s = i
                    .checked_mul(8)
                    .and_then(|at| b.get(at..at + 8))
                    .ok_or(out_of_bounds)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(s);
                Ok(i64::from_le_bytes(a))
            }
            dtype => Err(TensorError::NotIndex { dtype }),
        }
    }

    /// Copies element `src_index` of `src` over element `dst_index` of `self`.
    ///
    /// Both tensors must have the same element type. Works for every type: strings are cloned,
    /// packed elements are moved bit by bit.
    pub fn copy_element_from(
        &mut self,
        dst_index: usize,
        src: &Tensor,
        src_index: usize,
    ) -> Result<(), TensorError> {
        if self.dtype != src.dtype {
            return Err(TensorError::Representation {
                dtype: src.dtype,
                wanted: self.dtype.name(),
            });
        }
        let (dst_len, src_len) = (self.len, src.len);
        let oob = |index, len| TensorError::OutOfBounds { index, len };
        if dst_index >= dst_len {
            return Err(oob(dst_index, dst_len));
        }
        if src_index >= src_len {
            return Err(oob(src_index, src_len));
        }
        let bits = self.dtype.bits();
        match (&mut self.data, &src.data) {
            (Data::Strings(d), Data::Strings(s)) => {
                Arc::make_mut(d)[dst_index].clone_from(&s[src_index]);
            }
            (Data::Bytes(d), Data::Bytes(s)) if bits.is_multiple_of(8) => {
                let w = bits / 8;
                d.bytes_mut()?[dst_index * w..(dst_index + 1) * w]
                    .copy_from_slice(&s.bytes()[src_index * w..(src_index + 1) * w]);
            }
            (Data::Bytes(d), Data::Bytes(s)) => {
                let v = packed::read(s.bytes(), bits, src_index).ok_or(oob(src_index, src_len))?;
                packed::write(d.bytes_mut()?, bits, dst_index, v).ok_or(oob(dst_index, dst_len))?;
            }
            _ => return Err(self_not_matching(self.dtype)),
        }
        Ok(())
    }

    /// A tensor of `shape` made of blocks of `block` consecutive elements of `self`: output
    /// block `k` is elements `starts[k] .. starts[k] + block`. Every data-movement kernel
    /// (gathers, slices, transposes, tiling) can be written as this one copy, for every element
    /// type: fixed-width elements are copied as bytes, strings cloned, packed elements moved bit
    /// by bit. Every block is checked against the bounds before anything is copied.
    ///
    /// # Example
    /// ```
    /// use multigather_kernel::{DataType, Tensor};
    /// let t = Tensor::from_vec(DataType::Int32, &[2, 3], vec![0i32, 1, 2, 3, 4, 5])?;
    /// // Rows in reverse order.
    /// let r = t.take_blocks(&[2, 3], &[3, 0], 3)?;
    /// assert_eq!(r.as_slice::<i32>()?, &[3, 4, 5, 0, 1, 2]);
    /// # Ok::<(), multigather_kernel::tensor::TensorError>(())
    /// ```
    pub fn take_blocks(
        &self,
        shape: &[usize],
        starts: &[usize],
        block: usize,
    ) -> Result<Tensor, TensorError> {
        let (len, _) = checked_storage(self.dtype, shape)?;
        let given = starts.len().checked_mul(block);
        if given != Some(len) {
            return Err(TensorError::ElementCount {
                shape: shape.to_vec(),
                expected: len,
                actual: given.unwrap_or(usize::MAX),
            });
        }
        if let Some(&bad) = starts
            .iter()
            .find(|&&s| s.checked_add(block).is_none_or(|end| end > self.len))
        {
            return Err(TensorError::OutOfBounds {
                index: bad.saturating_add(block.saturating_sub(1)),
                len: self.len,
            });
        }
        let bits = self.dtype.bits();
        match &self.data {
            Data::Strings(s) => {
                let values = starts
                    .iter()
                    .flat_map(|&k| s[k..k + block].iter().cloned())
                    .collect();
                Tensor::from_strings(shape, values)
            }
            Data::Bytes(src) if bits.is_multiple_of(8) => {
                let w = bits / 8;
                let run = block * w;
                let mut bytes = try_with_capacity(len * w)?;
                for &k in starts {
                    bytes.extend_from_slice(&src.bytes()[k * w..k * w + run]);
                }
                Tensor::from_bytes(self.dtype, shape, &bytes)
            }
            Data::Bytes(_) => {
                let mut out = Tensor::zeros(self.dtype, shape)?;
                let mut j = 0;
                for &k in starts {
                    for i in k..k + block {
                        out.copy_element_from(j, self, i)?;
                        j += 1;
                    }
                }
                Ok(out)
            }
        }
    }

    /// Changes the shape without touching the elements; the element count must not change.
    pub fn reshape(&mut self, shape: &[usize]) -> Result<(), TensorError> {
        let to_len = element_count(shape);
        if to_len != Some(self.len) {
            return Err(TensorError::Reshape {
                from: self.shape.clone(),
                from_len: self.len,
                to: shape.to_vec(),
                to_len: to_len.unwrap_or(usize::MAX),
            });
        }
        self.shape = shape.to_vec();
        Ok(())
    }

    /// The same elements under another shape with the same element count.
    pub fn into_shape(mut self, shape: &[usize]) -> Result<Tensor, TensorError> {
        self.reshape(shape)?;
        Ok(self)
    }

    /// A copy of the leading corner `[0, shape[d])` of every dimension `d`; `shape` must have
    /// this tensor's rank and no larger dimension.
    ///
    /// # Example
    /// ```
    /// use multigather_kernel::{DataType, Tensor};
    /// let t = Tensor::from_vec(DataType::Int32, &[2, 3], vec![1i32, 2, 3, 4, 5, 6])?;
    /// assert_eq!(t.crop(&[2, 2])?.as_slice::<i32>()?, &[1, 2, 4, 5]);
    /// # Ok::<(), multigather_kernel::tensor::TensorError>(())
    /// ```
    pub fn crop(&self, shape: &[usize]) -> Result<Tensor, TensorError> {
        let fits =
            shape.len() == self.shape.len() && shape.iter().zip(&self.shape).all(|(a, b)| a <= b);
        if !fits {
            return Err(TensorError::Crop {
                from: self.shape.clone(),
                to: shape.to_vec(),
            });
        }
        let mut out = Tensor::zeros(self.dtype, shape)?;
        // Walk the cropped coordinates in row-major order, tracking the source position.
        let rank = shape.len();
        let mut src_strides = vec![1usize; rank];
        for d in (0..rank.saturating_sub(1)).rev() {
            src_strides[d] = src_strides[d + 1] * self.shape[d + 1];
        }
        let mut coord = vec![0usize; rank];
        for dst in 0..out.len {
            let src = coord.iter().zip(&src_strides).map(|(c, s)| c * s).sum();
            out.copy_element_from(dst, self, src)?;
            for d in (0..rank).rev() {
                coord[d] += 1;
                if coord[d] < shape[d] {
                    break;
                }
                coord[d] = 0;
            }
        }
        Ok(out)
    }

    fn not(&self, wanted: &'static str) -> TensorError {
        TensorError::Representation {
            dtype: self.dtype,
            wanted,
        }
    }

    /// The payload bytes with the padding bits of a packed last byte masked, for comparisons.
    fn canonical_last_byte(&self) -> Option<u8> {
        let bytes = self.as_bytes().ok()?;
        let last = *bytes.last()?;
        Some(last & !packed::padding_mask(self.dtype.bits(), self.len))
    }
}

fn self_not_matching(dtype: DataType) -> TensorError {
    TensorError::Representation {
        dtype,
        wanted: "matching representation",
    }
}

fn check_width<T>(dtype: DataType) -> Result<(), TensorError> {
    let width = std::mem::size_of::<T>();
    if dtype.byte_size() == Some(width) {
        Ok(())
    } else {
        Err(TensorError::ElementWidth { dtype, width })
    }
}

impl PartialEq for Tensor {
    /// Bitwise equality of element type, shape and elements (padding bits of a packed last byte
    /// ignored).
    fn eq(&self, other: &Tensor) -> bool {
        if self.dtype != other.dtype || self.shape != other.shape {
            return false;
        }
        match (&self.data, &other.data) {
            (Data::Strings(a), Data::Strings(b)) => a == b,
            (Data::Bytes(a), Data::Bytes(b)) => {
                let (a, b) = (a.bytes(), b.bytes());
                let n = a.len();
                n == b.len()
                    && (n == 0
                        || (a[..n - 1] == b[..n - 1]
                            && self.canonical_last_byte() == other.canonical_last_byte()))
            }
            _ => false,
        }
    }
}

impl Eq for Tensor {}

impl fmt::Debug for Tensor {
    /// `float[2, 3] [1, 2, 3, 4, 5, 6]`, showing at most 64 elements.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?} [", self.dtype, self.shape)?;
        const MAX: usize = 64;
        for i in 0..self.len.min(MAX) {
            if i > 0 {
                f.write_str(", ")?;
            }
            self.fmt_element(f, i)?;
        }
        if self.len > MAX {
            write!(f, ", ... {} more", self.len - MAX)?;
        }
        f.write_str("]")
    }
}

impl Tensor {
    fn fmt_element(&self, f: &mut fmt::Formatter<'_>, i: usize) -> fmt::Result {
        use DataType as D;
        let bytes = match &self.data {
            Data::Strings(s) => return write!(f, "{:?}", String::from_utf8_lossy(&s[i])),
            Data::Bytes(b) => b.bytes(),
        };
        let bits = self.dtype.bits();
        if !bits.is_multiple_of(8) {
            return match packed::read(bytes, bits, i) {
                Some(v) => write!(f, "{v:#x}"),
                None => f.write_str("?"),
            };
        }
        let w = bits / 8;
        let e = &bytes[i * w..(i + 1) * w];
        let le = |n: usize| {
            let mut a = [0u8; 8];
            a[..n].copy_from_slice(&e[..n]);
            u64::from_le_bytes(a)
        };
        match self.dtype {
            D::Float => write!(f, "{}", f32::from_bits(le(4) as u32)),
            D::Double => write!(f, "{}", f64::from_bits(le(8))),
            D::Float16 => write!(f, "{}", half::f16::from_bits(le(2) as u16)),
            D::Bfloat16 => write!(f, "{}", half::bf16::from_bits(le(2) as u16)),
            D::Int8 => write!(f, "{}", le(1) as u8 as i8),
            D::Int16 => write!(f, "{}", le(2) as u16 as i16),
            D::Int32 => write!(f, "{}", le(4) as u32 as i32),
            D::Int64 => write!(f, "{}", le(8) as i64),
            D::Uint8 | D::Uint16 | D::Uint32 | D::Uint64 | D::Bool => write!(f, "{}", le(w)),
            _ => {
                f.write_str("0x")?;
                e.iter().rev().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}

/// A tensor whose byte buffer has been allocated but not filled; see [`Tensor::uninit`].
///
/// A kernel writes every payload byte through [`UninitTensor::bytes_mut`] and then calls
/// [`UninitTensor::assume_init`]. Dropping it unfinished is fine: nothing is read.
pub struct UninitTensor {
    dtype: DataType,
    shape: Vec<usize>,
    len: usize,
    nbytes: usize,
    words: Vec<MaybeUninit<u64>>,
    /// The arena the words came from (taken by `assume_init`, given back on drop otherwise).
    home: Option<Arc<Arena>>,
}

impl Drop for UninitTensor {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.give_back(std::mem::take(&mut self.words));
        }
    }
}

impl UninitTensor {
    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The payload bytes (`dtype.storage_bytes(len)` of them), uninitialised.
    pub fn bytes_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        // SAFETY: the words are `MaybeUninit<u64>`, which has no validity requirement, and
        // `nbytes <= 8 * words.len()` (see `words_for`), so the byte view stays inside the
        // allocation and aliases nothing else.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.words.as_mut_ptr().cast::<MaybeUninit<u8>>(),
                self.nbytes,
            )
        }
    }

    /// The finished tensor, its elements written by `fill`, which must return the initialised
    /// view of the whole slice it is given (as the loops of `ops::vector` do); anything else is
    /// an error, so no unwritten element can be read.
    ///
    /// # Example
    /// ```
    /// use std::mem::MaybeUninit;
    /// use multigather_kernel::{DataType, Tensor};
    /// let out = Tensor::uninit(DataType::Int32, &[3])?;
    /// let t = out.fill(|slots: &mut [MaybeUninit<i32>]| {
    ///     for (i, s) in slots.iter_mut().enumerate() {
    ///         s.write(i as i32);
    ///     }
    ///     // SAFETY: every slot was written just now.
    ///     unsafe { &mut *(slots as *mut [MaybeUninit<i32>] as *mut [i32]) }
    /// })?;
    /// assert_eq!(t.as_slice::<i32>()?, &[0, 1, 2]);
    /// # Ok::<(), multigather_kernel::tensor::TensorError>(())
    /// ```
    pub fn fill<T: Pod>(
        mut self,
        fill: impl FnOnce(&mut [MaybeUninit<T>]) -> &mut [T],
    ) -> Result<Tensor, TensorError> {
        check_width::<T>(self.dtype)?;
        if std::mem::align_of::<T>() > 8 {
            return Err(TensorError::Alignment {
                dtype: self.dtype,
                align: std::mem::align_of::<T>(),
            });
        }
        let len = self.len;
        let bytes = self.bytes_mut();
        // SAFETY: the buffer is 8-byte aligned, enough for `T` (checked above), and holds
        // exactly `len` elements of `T`'s width (checked above); `MaybeUninit<T>` has no
        // validity requirement.
        let slots: &mut [MaybeUninit<T>] =
            unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), len) };
        let start = slots.as_ptr().cast::<T>();
        let done = fill(slots);
        if done.len() != len || (len > 0 && done.as_ptr() != start) {
            return Err(TensorError::ElementCount {
                shape: self.shape.clone(),
                expected: len,
                actual: done.len(),
            });
        }
        // SAFETY: `done`, an initialised `&mut [T]`, covers exactly the `len` elements of the
        // buffer, so every payload byte is written.
        Ok(unsafe { self.assume_init() })
    }

    /// [`UninitTensor::fill`] with a `fill` that may fail: its error is returned and the
    /// unfinished tensor dropped.
    ///
    /// # Example
    /// ```
    /// use std::mem::MaybeUninit;
    /// use multigather_kernel::{DataType, Tensor};
    /// use multigather_kernel::tensor::TensorError;
    /// let failed = Tensor::uninit(DataType::Int32, &[2])?.try_fill(
    ///     |_: &mut [MaybeUninit<i32>]| -> Result<&mut [i32], TensorError> {
    ///         Err(TensorError::OutOfMemory { bytes: 8 })
    ///     },
    /// );
    /// assert!(failed.is_err());
    /// # Ok::<(), multigather_kernel::tensor::TensorError>(())
    /// ```
    pub fn try_fill<T: Pod, E: From<TensorError>>(
        self,
        fill: impl FnOnce(&mut [MaybeUninit<T>]) -> Result<&mut [T], E>,
    ) -> Result<Tensor, E> {
        let mut failed = None;
        let done = self.fill(|slots| match fill(slots) {
            Ok(done) => done,
            Err(e) => {
                failed = Some(e);
                &mut []
            }
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(done?),
        }
    }

    /// The finished tensor.
    ///
    /// # Safety
    /// Every byte of [`UninitTensor::bytes_mut`] must have been written, and for packed sub-byte
    /// types the padding bits of the last byte must be zero.
    pub unsafe fn assume_init(mut self) -> Tensor {
        let words = std::mem::take(&mut self.words);
        let home = self.home.take().unwrap_or_else(Arena::current);
        Tensor {
            dtype: self.dtype,
            shape: std::mem::take(&mut self.shape),
            len: self.len,
            // SAFETY: the words past the payload were zeroed in `Tensor::uninit` and the caller
            // promises the payload bytes are written, so every word is initialised.
            data: Data::Bytes(unsafe { finish_words(words, home, self.nbytes) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality_is_bitwise() {
        let nan = |bits: u32| Tensor::from_vec(DataType::Float, &[1], vec![f32::from_bits(bits)]);
        assert_eq!(nan(0x7fc0_0000).unwrap(), nan(0x7fc0_0000).unwrap());
        assert_ne!(nan(0x7fc0_0000).unwrap(), nan(0x7fc0_0001).unwrap());
        assert_ne!(nan(0).unwrap(), nan(0x8000_0000).unwrap());
        let a = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 2.0]).unwrap();
        assert_ne!(a, a.clone().into_shape(&[2, 1]).unwrap());
        let u = Tensor::from_vec(DataType::Int32, &[2], vec![1i32, 2]).unwrap();
        let f = Tensor::from_vec(DataType::Float, &[2], vec![1i32, 2]).unwrap();
        assert_ne!(u, f);
    }

    #[test]
    fn constructors_check_sizes() {
        let e = Tensor::from_vec(DataType::Float, &[2, 2], vec![1.0f32; 3]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "shape [2, 2] holds 4 elements but 3 were given"
        );
        let e = Tensor::from_vec(DataType::Double, &[1], vec![1.0f32]).unwrap_err();
        assert!(matches!(e, TensorError::ElementWidth { width: 4, .. }));
        let e = Tensor::from_bytes(DataType::Int4, &[3], &[0; 1]).unwrap_err();
        assert!(matches!(e, TensorError::ByteLength { expected: 2, .. }));
        let e = Tensor::zeros(DataType::Float, &[usize::MAX, 2]).unwrap_err();
        assert!(matches!(e, TensorError::TooLarge { .. }));
        let e = Tensor::zeros(DataType::Float, &[usize::MAX / 2]).unwrap_err();
        assert!(matches!(e, TensorError::TooLarge { .. }));
        // Addressable, but more memory than any machine has: an error, not an abort, refused
        // by the budget before anything is allocated.
        let e = Tensor::zeros(DataType::Uint8, &[1 << 60]).unwrap_err();
        assert!(matches!(e, TensorError::OverBudget { .. }), "{e}");
        let e = Tensor::uninit(DataType::Uint8, &[1 << 60]).err().unwrap();
        assert!(matches!(e, TensorError::OverBudget { .. }), "{e}");
        let e = Tensor::zeros(DataType::String, &[1 << 60]).unwrap_err();
        assert!(matches!(e, TensorError::OverBudget { .. }), "{e}");
        // Within the budget but beyond what the allocator can give: still an error.
        let unlimited = Arena::new(usize::MAX, false);
        let e = unlimited
            .enter(|| Tensor::zeros(DataType::Uint8, &[1 << 60]))
            .unwrap_err();
        assert!(matches!(e, TensorError::OutOfMemory { .. }), "{e}");
    }

    #[test]
    fn packed_padding_is_cleared_and_ignored() {
        let t = Tensor::from_bytes(DataType::Int4, &[3], &[0x21, 0xf3]).unwrap();
        assert_eq!(t.as_bytes().unwrap(), &[0x21, 0x03]);
        let mut u = t.clone();
        u.as_bytes_mut().unwrap()[1] |= 0xf0;
        assert_eq!(t, u);
    }

    #[test]
    fn typed_views_check_width() {
        let t = Tensor::from_vec(DataType::Float16, &[2], vec![half::f16::ONE; 2]).unwrap();
        assert_eq!(t.as_slice::<u16>().unwrap(), &[0x3c00, 0x3c00]);
        assert!(t.as_slice::<u32>().is_err());
        let c = Tensor::zeros(DataType::Complex128, &[1]).unwrap();
        assert!(matches!(
            c.as_slice::<u128>(),
            Ok(_) | Err(TensorError::Alignment { .. })
        ));
        assert_eq!(c.as_slice::<[u64; 2]>().unwrap(), &[[0, 0]]);
        let s = Tensor::from_strings(&[1], vec![b"x".to_vec()]).unwrap();
        assert!(s.as_bytes().is_err());
        assert_eq!(s.as_strings().unwrap(), &[b"x".to_vec()]);
    }

    #[test]
    fn uninit_buffers_become_tensors() {
        let mut u = Tensor::uninit(DataType::Uint8, &[3]).unwrap();
        for (i, b) in u.bytes_mut().iter_mut().enumerate() {
            b.write(i as u8 + 1);
        }
        // SAFETY: all three bytes were written.
        let t = unsafe { u.assume_init() };
        assert_eq!(
            t,
            Tensor::from_vec(DataType::Uint8, &[3], vec![1u8, 2, 3]).unwrap()
        );
        assert!(t.padded_bytes().unwrap().len() >= 3 + 8);
        assert!(Tensor::uninit(DataType::String, &[1]).is_err());
    }

    #[test]
    fn elements_copy_across_representations() {
        let src = Tensor::from_bytes(DataType::Uint2, &[4], &[0b1110_0100]).unwrap();
        let mut dst = Tensor::zeros(DataType::Uint2, &[4]).unwrap();
        for i in 0..4 {
            dst.copy_element_from(3 - i, &src, i).unwrap();
        }
        assert_eq!(dst.as_bytes().unwrap(), &[0b0001_1011]);
        let e = dst.copy_element_from(4, &src, 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "element 4 is out of bounds for a tensor of 4 elements"
        );
        let idx = Tensor::from_vec(DataType::Int32, &[2], vec![-3i32, 7]).unwrap();
        assert_eq!(idx.index_at(0).unwrap(), -3);
        assert!(idx.index_at(2).is_err());
    }

    #[test]
    fn debug_shows_values() {
        let t = Tensor::from_vec(DataType::Int64, &[2], vec![-1i64, 5]).unwrap();
        assert_eq!(format!("{t:?}"), "int64[2] [-1, 5]");
        let s = Tensor::from_strings(&[1], vec![b"ab".to_vec()]).unwrap();
        assert_eq!(format!("{s:?}"), "string[1] [\"ab\"]");
    }
}
