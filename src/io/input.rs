//! Opening the files a model or a tensor is read from, with the checks external data gets.
//!
//! A file someone hands us may be anything the file system can hold: a FIFO that blocks the open
//! until a writer comes, `/dev/zero` that never ends, a symbolic link to either. What is read is
//! what was opened (the checks run on the open file, not just its name), and nothing is read
//! past the size limit:
//!
//! - a regular file is always fine, its size checked before a byte is read;
//! - a pipe is fine when the user named it (`inspect <(gunzip -c m.onnx.gz)`) and is read up to
//!   the limit; a file found by listing a directory (`--inputs DIR`, a test-data set) must be a
//!   regular file, since opening a FIFO there would wait forever;
//! - devices, sockets and directories are refused.

use std::fs::{File, Metadata};
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// How the path of an input came to us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Named by the user on the command line or through the API.
    Named,
    /// Found by listing a directory.
    Listed,
}

/// Opens `path` for reading after checking what it is, and checks the opened file again (a name
/// can be swapped between the check and the open).
pub(crate) fn open_input(path: &Path, origin: Origin) -> Result<(File, Metadata)> {
    // Checked before opening: opening a FIFO blocks until a writer comes.
    let named = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    check_kind(path, &named, origin)?;
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    check_kind(path, &meta, origin)?;
    Ok((file, meta))
}

fn check_kind(path: &Path, meta: &Metadata, origin: Origin) -> Result<()> {
    #[cfg(unix)]
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    #[cfg(unix)]
    let (fifo, device) = (
        kind.is_fifo(),
        kind.is_char_device() || kind.is_block_device(),
    );
    #[cfg(not(unix))]
    let (fifo, device) = (false, false);
    let refuse = |why: &str| Err(Error::io(path, std::io::Error::other(why.to_owned())));
    if kind.is_file() {
        Ok(())
    } else if kind.is_dir() {
        refuse("is a directory, not a file")
    } else if fifo && origin == Origin::Named {
        Ok(())
    } else if fifo {
        refuse("is a named pipe; files in a directory must be regular files")
    } else if device {
        refuse("is a device, not a file")
    } else {
        refuse("is not a regular file or a pipe")
    }
}

/// The error for an input of `len` bytes over `max`.
pub(crate) fn too_big(path: &Path, len: u64, max: u64) -> Error {
    Error::Limit(format!(
        "{}: {len} bytes is larger than the limit of {max} bytes",
        path.display()
    ))
}

/// Reads an opened input into memory, refusing it (before reading, for a regular file) when it
/// holds more than `max` bytes.
pub(crate) fn read_limited(file: File, meta: &Metadata, path: &Path, max: u64) -> Result<Vec<u8>> {
    if meta.len() > max {
        return Err(too_big(path, meta.len(), max));
    }
    let mut bytes = Vec::new();
    if meta.is_file() {
        bytes
            .try_reserve_exact(meta.len() as usize)
            .map_err(|_| too_big(path, meta.len(), max))?;
    }
    // One byte past the limit tells "at the limit" from "over it" without reading it all.
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > max {
        return Err(too_big(path, bytes.len() as u64, max));
    }
    Ok(bytes)
}

/// Reads the file at `path` (see `open_input` and `read_limited`).
///
/// # Example
/// ```
/// use multigather::io::{read_input, Origin};
/// let err = read_input(std::path::Path::new("/dev/zero"), 1 << 20, Origin::Named).unwrap_err();
/// assert_eq!(err.to_string(), "/dev/zero: is a device, not a file");
/// ```
pub fn read_input(path: &Path, max: u64, origin: Origin) -> Result<Vec<u8>> {
    let (file, meta) = open_input(path, origin)?;
    read_limited(file, &meta, path, max)
}
