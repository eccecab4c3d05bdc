//! The scalar reference kernel of `GatherMultiaxis`: the semantic oracle.
//!
//! This is a direct transcription of the definition in `docs/gather-multiaxis.md` (and of the
//! proposal's JavaScript): visit every output coordinate in row-major order, mask the dimensions
//! where the input or the logical indices have size 1 (that is broadcasting), read the index
//! tuple at the masked indices coordinate, replace the axis coordinates of the input coordinate
//! by the resolved indices, and copy that one element. It favours being obviously right over
//! being fast; [`super::fast`] must agree with it bit for bit on every input.
//!
//! Because output coordinates are visited in row-major order and each index tuple is first
//! needed at the output coordinate that equals its own coordinate (broadcast dimensions at 0),
//! the first failing index met here is the first failing index of the indices tensor in
//! row-major order. The fast kernel reports the same one.

use crate::tensor::Tensor;

use super::{
    check_operands, logical_indices_shape, resolve_index, GatherError, GatherSpec, Resolved,
};

/// `GatherMultiaxis(input, indices, axes, mode)`, computed one element at a time.
///
/// Same contract as [`super::gather_multiaxis`]; intended for tests and as documentation.
///
/// # Example
/// ```
/// use multigather_kernel::gather::{reference, GatherSpec};
/// use multigather_kernel::{DataType, Tensor};
/// let input = Tensor::from_vec(DataType::Int32, &[2, 3], vec![0i32, 1, 2, 10, 11, 12])?;
/// // GatherElements along axis 1: one index per output element.
/// let indices = Tensor::from_vec(DataType::Int64, &[2, 2], vec![2i64, 0, -1, 1])?;
/// let out = reference::gather_multiaxis(&input, &indices, &GatherSpec::new(vec![1]))?;
/// assert_eq!(out.as_slice::<i32>()?, &[2, 0, 12, 11]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn gather_multiaxis(
    input: &Tensor,
    indices: &Tensor,
    spec: &GatherSpec,
) -> Result<Tensor, GatherError> {
    let output_shape = check_operands(input.shape(), indices, indices.shape(), spec)?;
    let logical = logical_indices_shape(indices.shape(), spec)?;
    let coordinate_size = spec.coordinate_size();
    let mut output = Tensor::zeros(input.dtype(), &output_shape)?;

    for (out_flat, out_coord) in Coordinates::new(&output_shape).enumerate() {
        // Broadcasting: a dimension of size 1 contributes coordinate 0.
        let mut input_coord = mask(&out_coord, input.shape());
        let mut index_coord = mask(&out_coord, &logical);
        // The last logical coordinate addresses a whole tuple of `coordinate_size` values.
        if let Some(last) = index_coord.last_mut() {
            *last *= coordinate_size;
        }
        let mut zero = false;
        for &axis in &spec.axes {
            let value = indices.index_at(flat(&index_coord, indices.shape()))?;
            let dim = input.shape()[axis];
            match resolve_index(value, dim, spec.mode) {
                Resolved::At(i) => input_coord[axis] = i,
                Resolved::Zero => zero = true,
                Resolved::OutOfRange => {
                    return Err(GatherError::IndexOutOfRange {
                        position: index_coord,
                        axis,
                        value,
                        dim,
                    })
                }
            }
            if let Some(last) = index_coord.last_mut() {
                *last += 1;
            }
        }
        // In mode `zero` the element keeps the zero it was created with.
        if !zero {
            output.copy_element_from(out_flat, input, flat(&input_coord, input.shape()))?;
        }
    }
    Ok(output)
}

/// `coord` with the coordinates of size-1 dimensions of `shape` replaced by 0.
fn mask(coord: &[usize], shape: &[usize]) -> Vec<usize> {
    coord
        .iter()
        .zip(shape)
        .map(|(&c, &n)| if n == 1 { 0 } else { c })
        .collect()
}

/// Row-major flat position of `coord` in `shape`.
fn flat(coord: &[usize], shape: &[usize]) -> usize {
    coord.iter().zip(shape).fold(0, |acc, (&c, &n)| acc * n + c)
}

/// Every coordinate of a shape in row-major order (one, `[]`, for rank 0; none if a dimension
/// is 0).
struct Coordinates {
    shape: Vec<usize>,
    next: Option<Vec<usize>>,
}

impl Coordinates {
    fn new(shape: &[usize]) -> Coordinates {
        let empty = shape.contains(&0);
        Coordinates {
            shape: shape.to_vec(),
            next: (!empty).then(|| vec![0; shape.len()]),
        }
    }
}

impl Iterator for Coordinates {
    type Item = Vec<usize>;

    fn next(&mut self) -> Option<Vec<usize>> {
        let current = self.next.take()?;
        let mut following = current.clone();
        for d in (0..self.shape.len()).rev() {
            following[d] += 1;
            if following[d] < self.shape[d] {
                self.next = Some(following);
                break;
            }
            following[d] = 0;
        }
        Some(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gather::OutOfRange;
    use crate::DataType;

    #[test]
    fn coordinates_cover_rank_zero_and_empty() {
        assert_eq!(
            Coordinates::new(&[]).collect::<Vec<_>>(),
            vec![Vec::<usize>::new()]
        );
        assert_eq!(Coordinates::new(&[2, 0]).count(), 0);
        assert_eq!(
            Coordinates::new(&[2, 2]).collect::<Vec<_>>(),
            vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]
        );
    }

    #[test]
    fn first_bad_index_in_indices_order() {
        // Indices broadcast over the output's first dimension; the bad values are at positions
        // [0, 0, 1] (tuple 0, second coordinate) and [0, 0, 3] (tuple 1, second coordinate).
        let input = Tensor::zeros(DataType::Float, &[2, 3, 4]).unwrap();
        let indices = Tensor::from_vec(DataType::Int64, &[1, 1, 4], vec![0i64, 9, 1, -9]).unwrap();
        let err = gather_multiaxis(&input, &indices, &GatherSpec::new(vec![1, 2])).unwrap_err();
        assert_eq!(
            err,
            GatherError::IndexOutOfRange {
                position: vec![0, 0, 1],
                axis: 2,
                value: 9,
                dim: 4
            }
        );
        let zero = GatherSpec::new(vec![1, 2]).with_mode(OutOfRange::Zero);
        assert!(gather_multiaxis(&input, &indices, &zero).is_ok());
    }

    #[test]
    fn strings_and_packed_elements() {
        let input =
            Tensor::from_strings(&[3], vec![b"a".to_vec(), b"bb".to_vec(), b"".to_vec()]).unwrap();
        let indices = Tensor::from_vec(DataType::Int32, &[4], vec![1i32, -1, 5, 0]).unwrap();
        let spec = GatherSpec::new(vec![0]).with_mode(OutOfRange::Zero);
        let out = gather_multiaxis(&input, &indices, &spec).unwrap();
        assert_eq!(
            out.as_strings().unwrap(),
            &[b"bb".to_vec(), b"".to_vec(), b"".to_vec(), b"a".to_vec()]
        );
        let input = Tensor::from_bytes(DataType::Uint4, &[3], &[0x21, 0x03]).unwrap();
        let spec = GatherSpec::new(vec![0]).with_mode(OutOfRange::Clamp);
        let out = gather_multiaxis(&input, &indices, &spec).unwrap();
        assert_eq!(out.as_bytes().unwrap(), &[0x32, 0x13]);
    }
}
