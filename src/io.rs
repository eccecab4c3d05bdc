//! Reading and writing model files: memory mapping, external data, atomic saves.
//!
//! Why one file: loading and saving share the external-data rules (locations, links, the identity
//! of files), which are written here once; reading inputs, checks and cleanup are in `io/`.
//!
//! Loading maps the file and decodes it in place, so raw weights stay in the page cache until
//! something reads them. External data files are opened once each, checked (see
//! [`LoadOptions`]), mapped, and each tensor gets a slice of its file. Saving writes a temporary
//! file in the destination directory, syncs it and renames it over the target, so a failure never
//! leaves a partial output and never touches the input.

mod checks;
mod cleanup;
pub mod files;
mod input;
mod lock;

pub use cleanup::remove_temporary_files;
pub use input::{read_input, Origin};

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::ir::{AttrValue, Attribute, ExternalData, Graph, Model, Payload, StoredTensor};
use crate::proto::{self, DecodeLimits};

/// Limits and checks applied while loading.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// Largest model file accepted, in bytes.
    pub max_file_bytes: u64,
    /// Largest single tensor accepted, in bytes.
    pub max_tensor_bytes: u64,
    /// Most nodes in the whole model.
    pub max_nodes: usize,
    /// Deepest subgraph nesting.
    pub max_depth: usize,
    /// Check the model's structure after decoding: the graph invariants, no recursive functions,
    /// and the arity and attribute types of known operators (see the `checks` module). Only a
    /// caller that wants to look at an invalid model turns this off.
    pub check: bool,
    /// How regular files (the model and its external data) are brought into memory.
    pub access: FileAccess,
}

/// How [`load_with`] brings a regular file into memory.
///
/// # Example
/// ```no_run
/// use multigather::io::{load_with, FileAccess, LoadOptions};
/// // A process that cannot handle SIGBUS (an interpreter embedding the library) reads.
/// let options = LoadOptions { access: FileAccess::Read, ..Default::default() };
/// let model = load_with("model.onnx".as_ref(), &options).unwrap();
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileAccess {
    /// Map the file: nothing is copied and pages are read on first use. A mapped file that
    /// another process truncates faults (`SIGBUS`) at the next read of a lost page, so a process
    /// mapping its inputs needs a handler for that signal, as the binary has.
    #[default]
    Map,
    /// Read the file into memory (a fallible allocation of its size): slower for large weights,
    /// but a file truncated under the reader is a short read, an error naming the file.
    Read,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            max_file_bytes: 1 << 40,
            max_tensor_bytes: 1 << 40,
            max_nodes: 10_000_000,
            max_depth: 64,
            check: true,
            access: FileAccess::Map,
        }
    }
}

/// Loads a model from a file with default options.
///
/// # Example
/// ```no_run
/// let model = multigather::io::load("model.onnx").unwrap();
/// println!("{} nodes", model.graph.node_count());
/// ```
pub fn load(path: impl AsRef<Path>) -> Result<Model> {
    load_with(path.as_ref(), &LoadOptions::default())
}

/// Loads a model from a file. External data resolves against the file's directory.
///
/// A regular file is mapped; a pipe (as in `multigather inspect <(gunzip -c model.onnx.gz)`) is
/// read into memory, up to the size limit; devices, sockets and directories are refused.
pub fn load_with(path: &Path, options: &LoadOptions) -> Result<Model> {
    // Held until the model and its data files are open (see `lock`).
    let _pair = lock::DirLock::shared(&parent_dir(path));
    let (file, meta) = input::open_input(path, Origin::Named)?;
    let bytes = if meta.is_file() && options.access == FileAccess::Map {
        if meta.len() > options.max_file_bytes {
            return Err(input::too_big(path, meta.len(), options.max_file_bytes));
        }
        map_file(&file, path)?
    } else {
        Bytes::from(input::read_limited(
            file,
            &meta,
            path,
            options.max_file_bytes,
        )?)
    };
    let base = path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                p.to_path_buf()
            }
        })
        .unwrap_or_else(|| PathBuf::from("."));
    let mut model = decode_with(bytes, Some(base), options)?;
    model.source_file = Some(path.to_path_buf());
    Ok(model)
}

/// Loads a model from bytes. A model with external data needs [`load`] instead, which knows the
/// directory the data lives in.
///
/// # Example
/// ```
/// use multigather::ir::{Graph, Model};
/// let bytes = multigather::io::to_bytes(&Model::new(Graph::new("g"), 13)).unwrap();
/// let model = multigather::io::load_bytes(&bytes).unwrap();
/// assert_eq!(model.opset(""), Some(13));
/// ```
pub fn load_bytes(bytes: &[u8]) -> Result<Model> {
    decode_with(Bytes::copy_from_slice(bytes), None, &LoadOptions::default())
}

fn decode_with(bytes: Bytes, base: Option<PathBuf>, options: &LoadOptions) -> Result<Model> {
    let limits = DecodeLimits {
        max_depth: options.max_depth,
        max_nodes: options.max_nodes,
    };
    let mut model = proto::decode(bytes, limits)?;
    let mut resolver = ExternalResolver {
        base: base.clone(),
        files: HashMap::new(),
        access: options.access,
        max_file_bytes: options.max_file_bytes,
    };
    let max = options.max_tensor_bytes;
    for_each_tensor(&mut model, &mut |t| {
        if let Payload::External(e) = &mut t.payload {
            let name = t.name.clone().unwrap_or_default();
            resolver.resolve(&name, e)?;
        }
        if t.stored_len() as u64 > max {
            return Err(Error::Limit(format!(
                "tensor '{}' holds {} bytes, more than the limit of {max}",
                t.display_name(),
                t.stored_len()
            )));
        }
        t.check_size()
    })?;
    if options.check {
        checks::check_model(&model)?;
    }
    model.base_dir = base;
    Ok(model)
}

/// Calls `f` on every stored tensor of the model: initializers and tensor attributes of every
/// graph, subgraph and function.
pub fn for_each_tensor(
    model: &mut Model,
    f: &mut dyn FnMut(&mut StoredTensor) -> Result<()>,
) -> Result<()> {
    fn graph(g: &mut Graph, f: &mut dyn FnMut(&mut StoredTensor) -> Result<()>) -> Result<()> {
        for t in &mut g.initializers {
            f(t)?;
        }
        for id in g.node_ids_unordered() {
            let needs = g.node(id).attributes.iter().any(|a| {
                matches!(
                    a.value,
                    AttrValue::Tensor(_)
                        | AttrValue::Tensors(_)
                        | AttrValue::Graph(_)
                        | AttrValue::Graphs(_)
                )
            });
            if !needs {
                continue;
            }
            let mut node = g.node_mut(id);
            node.attributes
                .iter_mut()
                .try_for_each(|a| attribute(a, f))?;
        }
        Ok(())
    }
    fn attribute(
        a: &mut Attribute,
        f: &mut dyn FnMut(&mut StoredTensor) -> Result<()>,
    ) -> Result<()> {
        match &mut a.value {
            AttrValue::Tensor(t) => f(t),
            AttrValue::Tensors(ts) => ts.iter_mut().try_for_each(&mut *f),
            AttrValue::Graph(sub) => graph(sub, f),
            AttrValue::Graphs(subs) => subs.iter_mut().try_for_each(|s| graph(s, f)),
            _ => Ok(()),
        }
    }
    graph(&mut model.graph, f)?;
    for func in &mut model.functions {
        graph(&mut func.body, f)?;
        // Defaults may hold tensors and graphs too; they are saved like any other.
        func.attribute_defaults
            .iter_mut()
            .try_for_each(|a| attribute(a, f))?;
    }
    Ok(())
}

fn map_file(file: &File, path: &Path) -> Result<Bytes> {
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the map is read-only. Like every tool that maps its inputs, we rely on nobody
    // truncating the file while it is mapped; saves replace files by rename, never in place.
    let map = unsafe { memmap2::Mmap::map(file) }.map_err(|e| Error::io(path, e))?;
    Ok(Bytes::from_owner(map))
}

struct ExternalResolver {
    base: Option<PathBuf>,
    files: HashMap<String, Bytes>,
    access: FileAccess,
    max_file_bytes: u64,
}

impl ExternalResolver {
    fn resolve(&mut self, tensor: &str, e: &mut ExternalData) -> Result<()> {
        let bad = |reason: String| Error::ExternalData {
            tensor: tensor.to_owned(),
            reason,
        };
        let (mut location, mut offset, mut length) = (None, None, None);
        for (i, (key, value)) in e.entries.iter().enumerate() {
            // Readers disagree on which of two entries wins; refuse the ambiguity.
            if e.entries[..i].iter().any(|(k, _)| k == key) {
                return Err(bad(format!("'{key}' is given twice")));
            }
            let parse = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| bad(format!("{key} '{v}' is not a non-negative integer")))
            };
            match key.as_str() {
                "location" => location = Some(value.clone()),
                "offset" => offset = Some(parse(value)?),
                "length" => length = Some(parse(value)?),
                "checksum" => {}
                other => return Err(bad(format!("unknown key '{other}'"))),
            }
        }
        let location = location.ok_or_else(|| bad("no 'location' key".into()))?;
        check_location(&location).map_err(bad)?;
        let Some(base) = &self.base else {
            return Err(bad(
                "the model was loaded from bytes, so external files cannot be located".into(),
            ));
        };
        if !self.files.contains_key(&location) {
            let bytes =
                open_inside(base, &location, self.access, self.max_file_bytes).map_err(bad)?;
            self.files.insert(location.clone(), bytes);
        }
        let file = &self.files[&location];
        let offset = offset.unwrap_or(0);
        let available = (file.len() as u64).checked_sub(offset).ok_or_else(|| {
            bad(format!(
                "offset {offset} is past the end of '{location}' ({} bytes)",
                file.len()
            ))
        })?;
        let length = length.unwrap_or(available);
        if length > available {
            return Err(bad(format!(
                "offset {offset} + length {length} is past the end of '{location}' ({} bytes)",
                file.len()
            )));
        }
        let (start, end) = (offset as usize, (offset + length) as usize);
        e.location = location;
        e.offset = offset;
        e.bytes = file.slice(start..end);
        Ok(())
    }
}

/// Checks that an external data location is a plain relative path that stays inside the model's
/// directory.
pub fn check_location(location: &str) -> std::result::Result<(), String> {
    if location.is_empty() {
        return Err("location is empty".into());
    }
    if location.contains('\0') {
        return Err("location contains a NUL byte".into());
    }
    if location.contains('\\') {
        return Err(format!("location '{location}' contains a backslash"));
    }
    let bytes = location.as_bytes();
    if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
        return Err(format!("location '{location}' starts with a drive letter"));
    }
    for c in Path::new(location).components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!("location '{location}' contains a '..' component"))
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("location '{location}' is an absolute path"))
            }
        }
    }
    Ok(())
}

/// Opens `base/location`, refusing symlinks anywhere below `base`, anything but a regular file,
/// and hard-linked files, and maps or reads it. What is checked is the file that was opened: its
/// identity is compared with the checked path.
fn open_inside(
    base: &Path,
    location: &str,
    access: FileAccess,
    max_bytes: u64,
) -> std::result::Result<Bytes, String> {
    let mut path = base.to_path_buf();
    for c in Path::new(location).components() {
        if let Component::Normal(part) = c {
            path.push(part);
            let meta =
                std::fs::symlink_metadata(&path).map_err(|e| format!("'{location}': {e}"))?;
            if meta.file_type().is_symlink() {
                return Err(format!(
                    "'{location}': '{}' is a symbolic link",
                    path.display()
                ));
            }
        }
    }
    // Checked before opening: opening a FIFO for reading blocks until a writer comes, and a
    // device can be endless.
    let meta = std::fs::symlink_metadata(&path).map_err(|e| format!("'{location}': {e}"))?;
    if !meta.is_file() {
        return Err(format!("'{location}' is not a regular file"));
    }
    let file = File::open(&path).map_err(|e| format!("'{location}': {e}"))?;
    let meta = file.metadata().map_err(|e| format!("'{location}': {e}"))?;
    if !meta.is_file() {
        return Err(format!("'{location}' is not a regular file"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let linked = std::fs::symlink_metadata(&path).map_err(|e| format!("'{location}': {e}"))?;
        if linked.dev() != meta.dev() || linked.ino() != meta.ino() {
            return Err(format!("'{location}' changed while it was being opened"));
        }
        if meta.nlink() > 1 {
            return Err(format!(
                "'{location}' is a hard link ({} links)",
                meta.nlink()
            ));
        }
    }
    match access {
        FileAccess::Map => map_file(&file, &path),
        FileAccess::Read => input::read_limited(file, &meta, &path, max_bytes).map(Bytes::from),
    }
    .map_err(|e| e.to_string())
}

/// How to store tensor payloads when saving.
#[derive(Clone, Debug, Default)]
pub enum ExternalPolicy {
    /// Keep external references as they are when the output goes to the directory the model was
    /// loaded from; otherwise store those tensors inline.
    #[default]
    Keep,
    /// Store every tensor inline.
    Inline,
    /// Store tensors of at least `threshold` bytes in `file`, a name relative to the output's
    /// directory; everything else inline.
    File { file: String, threshold: usize },
}

/// Options for [`save_with`].
#[derive(Clone, Debug, Default)]
pub struct SaveOptions {
    pub external: ExternalPolicy,
}

/// Serializes a model with every payload inline.
pub fn to_bytes(model: &Model) -> Result<Vec<u8>> {
    proto::encode_with(model, &inline)
}

/// External payloads as raw data; everything else as stored.
fn inline(t: &StoredTensor) -> Option<Payload> {
    match &t.payload {
        Payload::External(e) => Some(Payload::Raw(e.bytes.clone())),
        _ => None,
    }
}

/// Saves a model with default options (see [`ExternalPolicy::Keep`]).
pub fn save(model: &Model, path: impl AsRef<Path>) -> Result<()> {
    save_with(model, path.as_ref(), &SaveOptions::default())
}

/// Saves a model atomically: temporary files in the destination directory, synced, then renamed.
/// The model itself is not modified or copied; payloads are redirected while encoding.
///
/// What a save never does: leave a partial file, touch a file the model reads its data from,
/// replace a directory, device or pipe with a file (a device or pipe is written to instead, so
/// `-o /dev/null` works), or leave a new external data file beside an old model when the model
/// itself could not be renamed into place (the previous data file is put back).
pub fn save_with(model: &Model, path: &Path, options: &SaveOptions) -> Result<()> {
    save_encoded(model, path, options).map(drop)
}

/// [`save_with`], returning the bytes of the model file it wrote: the model as saved (its
/// external data references included), whatever the destination (a device, standard output)
/// gives back when read.
pub fn save_encoded(model: &Model, path: &Path, options: &SaveOptions) -> Result<Vec<u8>> {
    let dir = parent_dir(path);
    check_sources_intact(model)?;
    let sources = data_sources(model);
    refuse_source(&sources, path)?;
    let target = Target::of(path)?;
    let (bytes, data_file) = match &options.external {
        ExternalPolicy::Inline => (proto::encode_with(model, &inline)?, None),
        ExternalPolicy::Keep => {
            let same_dir = match (&model.base_dir, dir.canonicalize()) {
                (Some(base), Ok(out)) => base.canonicalize().is_ok_and(|b| b == out),
                _ => false,
            };
            let bytes = if same_dir {
                proto::encode(model)?
            } else {
                proto::encode_with(model, &inline)?
            };
            (bytes, None)
        }
        ExternalPolicy::File { file, threshold } => {
            check_location(file).map_err(|reason| Error::ExternalData {
                tensor: "*".into(),
                reason,
            })?;
            if target != Target::Replace {
                return Err(Error::io(
                    path,
                    std::io::Error::other("external data needs the output to be a regular file"),
                ));
            }
            check_data_target(model, &dir, file, path, &sources)?;
            let (tmp, moved) = write_external(model, &dir, file, *threshold)?;
            let bytes = proto::encode_with(model, &|t| {
                moved
                    .get(&(t as *const StoredTensor as usize))
                    .cloned()
                    .or_else(|| inline(t))
            })?;
            (bytes, Some((tmp, dir.join(file))))
        }
    };
    match target {
        Target::Stream => return write_stream(path, &bytes).map(|()| bytes),
        Target::Stdout => return write_stdout(path, &bytes).map(|()| bytes),
        Target::Replace => {}
    }
    // Both files are complete and synced before either is renamed, so running out of space
    // changes nothing; they are renamed under the directory's lock, so a concurrent save or load
    // of the same pair sees them together (see `lock`).
    let tmp = staged(path, &bytes)?;
    let _pair = lock::DirLock::exclusive(&dir);
    match data_file {
        None => rename_into(tmp, path),
        Some((data, data_path)) => replace_pair(data, &data_path, tmp, path),
    }?;
    Ok(bytes)
}

/// Whether `a` and `b` name one existing file (through links or other spellings of the path).
///
/// # Example
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("m.onnx");
/// std::fs::write(&path, b"")?;
/// assert!(multigather::io::same_file(&path, &dir.path().join(".").join("m.onnx")));
/// assert!(!multigather::io::same_file(&path, &dir.path().join("other.onnx")));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return x.dev() == y.dev() && x.ino() == y.ino();
        }
    }
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// The directory a file is saved in.
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// How a save reaches its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// A new or regular file: a temporary file renamed over it.
    Replace,
    /// A device or pipe (`/dev/null`, a shell's `>(...)`): written to directly, since renaming a
    /// file over it would replace the device node itself.
    Stream,
    /// The process's standard output (`-`, `/dev/stdout`, or any name for the same file): written
    /// through the open descriptor, so `-o /dev/stdout > captured` fills `captured` and leaves
    /// `/dev/stdout` alone.
    Stdout,
}

impl Target {
    fn of(path: &Path) -> Result<Target> {
        let refuse = |why: &str| Err(Error::io(path, std::io::Error::other(why.to_owned())));
        if path == Path::new("-") {
            return Ok(Target::Stdout);
        }
        let link = match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Target::Replace),
            Err(e) => return Err(Error::io(path, e)),
            Ok(m) => m,
        };
        let is_link = link.file_type().is_symlink();
        let meta = if is_link {
            match std::fs::metadata(path) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return refuse("is a symbolic link to nothing; not replacing it")
                }
                Err(e) => return Err(Error::io(path, e)),
            }
        } else {
            link
        };
        if is_stdout(&meta) {
            Ok(Target::Stdout)
        } else if meta.is_dir() {
            Err(Error::io(
                path,
                std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
            ))
        } else if meta.is_file() && is_link {
            // Replacing the link would lose it; writing through it would replace a directory
            // entry somewhere else. The user can name the target.
            refuse("is a symbolic link; not replacing it (name the file it points to instead)")
        } else if meta.is_file() {
            Ok(Target::Replace)
        } else {
            Ok(Target::Stream)
        }
    }
}

/// Whether `path` is where this process's standard output goes: `-`, or a name (such as
/// `/dev/stdout`) for the very file, pipe or device standard output is.
///
/// # Example
/// ```
/// assert!(multigather::io::is_stdout_path(std::path::Path::new("-")));
/// assert!(!multigather::io::is_stdout_path(std::path::Path::new("no/such/file")));
/// ```
pub fn is_stdout_path(path: &Path) -> bool {
    path == Path::new("-") || std::fs::metadata(path).is_ok_and(|m| is_stdout(&m))
}

/// Whether `meta` describes the file standard output is open on.
fn is_stdout(meta: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        use std::os::unix::fs::MetadataExt;
        let Ok(fd) = std::io::stdout().as_fd().try_clone_to_owned() else {
            return false;
        };
        File::from(fd)
            .metadata()
            .is_ok_and(|out| out.dev() == meta.dev() && out.ino() == meta.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        false
    }
}

/// The files the model's external payloads are read from, canonicalized.
fn data_sources(model: &Model) -> Vec<PathBuf> {
    let Some(base) = &model.base_dir else {
        return Vec::new();
    };
    let mut sources = Vec::new();
    let _ = visit_tensors(model, &mut |t| {
        if let Payload::External(e) = &t.payload {
            if let Ok(p) = base.join(&e.location).canonicalize() {
                if !sources.contains(&p) {
                    sources.push(p);
                }
            }
        }
        Ok(())
    });
    sources
}

/// Checks that every external data file still holds the bytes the model maps from it. A file
/// truncated since loading would kill the process with `SIGBUS` at the first read of a page past
/// its new end; this turns the common case (truncated before the save starts) into an error, and
/// the binary's `SIGBUS` handler ends the rest with a one-line message.
fn check_sources_intact(model: &Model) -> Result<()> {
    let Some(base) = &model.base_dir else {
        return Ok(());
    };
    let mut needed: HashMap<String, u64> = HashMap::new();
    visit_tensors(model, &mut |t| {
        if let Payload::External(e) = &t.payload {
            let end = e.offset.saturating_add(e.bytes.len() as u64);
            let at = needed.entry(e.location.clone()).or_default();
            *at = (*at).max(end);
        }
        Ok(())
    })?;
    for (location, end) in needed {
        let path = base.join(location);
        let len = std::fs::metadata(&path)
            .map_err(|e| Error::io(&path, e))?
            .len();
        if len < end {
            return Err(Error::io(
                &path,
                std::io::Error::other(format!(
                    "the file shrank to {len} bytes after the model was loaded; it needs {end}"
                )),
            ));
        }
    }
    Ok(())
}

/// Refuses to write over a file the model reads tensor data from: the model being saved, and
/// the one it was loaded from, would lose their weights.
fn refuse_source(sources: &[PathBuf], path: &Path) -> Result<()> {
    if path.canonicalize().is_ok_and(|p| sources.contains(&p)) {
        return Err(Error::io(
            path,
            std::io::Error::other("the model reads tensor data from this file; not overwriting it"),
        ));
    }
    Ok(())
}

/// Checks where an external data file is about to be written: not over the model output, not
/// over the file the model was loaded from or one it reads tensor data from, not through a
/// symbolic link (in any component below the output's directory: the loader refuses those, so
/// the saved model would not load) and not over anything but a regular file.
fn check_data_target(
    model: &Model,
    dir: &Path,
    file: &str,
    model_path: &Path,
    sources: &[PathBuf],
) -> Result<()> {
    let data_path = dir.join(file);
    let fail = |reason: &str| {
        Err(Error::io(
            &data_path,
            std::io::Error::other(reason.to_owned()),
        ))
    };
    let dir_of = |p: &Path| parent_dir(p).canonicalize().ok();
    if data_path.file_name() == model_path.file_name()
        && dir_of(&data_path).is_some()
        && dir_of(&data_path) == dir_of(model_path)
    {
        return fail("the external data file would be the output model itself");
    }
    let same_file = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if model
        .source_file
        .as_deref()
        .is_some_and(|src| same_file(src, &data_path))
    {
        return fail("this is the model being rewritten; not overwriting it");
    }
    refuse_source(sources, &data_path)?;
    let mut below = dir.to_path_buf();
    let parts: Vec<_> = Path::new(file).components().collect();
    for (i, part) in parts.iter().enumerate() {
        let Component::Normal(name) = part else {
            continue;
        };
        below.push(name);
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&below) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(Error::io(&below, e)),
            Ok(m) if m.file_type().is_symlink() && last => {
                return fail("is a symbolic link; not replacing it")
            }
            Ok(m) if m.file_type().is_symlink() => {
                return fail(&format!(
                "'{}' is a symbolic link; external data must stay inside the output's directory",
                below.display()
            ))
            }
            Ok(m) if last && !m.is_file() => {
                return fail("is not a regular file; not replacing it")
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// A temporary file beside an output, registered (see `cleanup`) until it is renamed into place
/// or dropped, which deletes it.
struct Temp<F = File> {
    // Declared first, so dropped (deleting the file) before the registration is.
    file: tempfile::NamedTempFile<F>,
    _registration: cleanup::Registration,
}

impl<F> Temp<F> {
    fn new(file: tempfile::NamedTempFile<F>) -> Temp<F> {
        let registration = cleanup::register(file.path());
        Temp {
            file,
            _registration: registration,
        }
    }

    /// Renames the file to `path`, then forgets it.
    fn persist(self, path: &Path) -> std::io::Result<()> {
        let Temp {
            file,
            _registration,
        } = self;
        file.persist(path).map(drop).map_err(|e| e.error)
    }
}

impl Temp {
    fn as_file(&self) -> &File {
        self.file.as_file()
    }

    fn as_file_mut(&mut self) -> &mut File {
        self.file.as_file_mut()
    }
}

/// Writes `bytes` to a synced temporary file beside `path`.
fn staged(path: &Path, bytes: &[u8]) -> Result<Temp> {
    let mut tmp = temp_for(path)?;
    tmp.as_file_mut()
        .write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| Error::io(path, e))?;
    Ok(tmp)
}

/// Writes `bytes` to standard output; errors name `path` (as the user gave it).
fn write_stdout(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| Error::io(path, e))
}

/// Writes `bytes` straight into a device or pipe.
fn write_stream(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.flush()))
        .map_err(|e| Error::io(path, e))
}

/// Renames the external data file into place, then the model. If the model cannot be renamed,
/// the data file that was there before is put back (or the new one removed), so a failed save
/// leaves both files as they were.
fn replace_pair(data: Temp, data_path: &Path, model: Temp, path: &Path) -> Result<()> {
    data.as_file()
        .sync_all()
        .map_err(|e| Error::io(data_path, e))?;
    let previous = keep_previous(data_path)?;
    rename_into(data, data_path)?;
    let Err(err) = rename_into(model, path) else {
        return Ok(());
    };
    let restored = match previous {
        Some(old) => old.persist(data_path),
        None => std::fs::remove_file(data_path),
    };
    match restored {
        Ok(()) => Err(err),
        Err(e) => Err(Error::io(
            data_path,
            std::io::Error::other(format!(
                "{err}; putting back the previous data file failed too: {e}"
            )),
        )),
    }
}

/// A second name for the file at `path` (a hard link, or a copy where links are not supported),
/// deleted when dropped, so the file can be put back after it is replaced.
fn keep_previous(path: &Path) -> Result<Option<Temp<()>>> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    tempfile::Builder::new()
        .prefix(".multigather-")
        .suffix(".previous")
        .make_in(parent_dir(path), |p| {
            std::fs::hard_link(path, p).or_else(|_| std::fs::copy(path, p).map(drop))
        })
        .map(|file| Some(Temp::new(file)))
        .map_err(|e| Error::io(path, e))
}

/// Writes every non-string tensor of at least `threshold` bytes into a temporary file for
/// `dir/file`, each aligned to 4 KiB, and returns the file with the payload each tensor (keyed by
/// address; the model is borrowed throughout) is to be saved with.
fn write_external(
    model: &Model,
    dir: &Path,
    file: &str,
    threshold: usize,
) -> Result<(Temp, HashMap<usize, Payload>)> {
    let data_path = dir.join(file);
    let mut tmp = temp_for(&data_path)?;
    let mut moved = HashMap::new();
    let mut offset = 0u64;
    visit_tensors(model, &mut |t| {
        if t.elem == crate::DataType::String || t.stored_len() < threshold {
            return Ok(());
        }
        let aligned = offset.div_ceil(4096) * 4096;
        let pad = vec![0u8; (aligned - offset) as usize];
        let bytes = t.le_bytes()?;
        let out = tmp.as_file_mut();
        out.write_all(&pad)
            .and_then(|_| out.write_all(&bytes))
            .map_err(|e| Error::io(&data_path, e))?;
        offset = aligned + bytes.len() as u64;
        let payload = Payload::External(ExternalData {
            entries: vec![
                ("location".to_owned(), file.to_owned()),
                ("offset".to_owned(), aligned.to_string()),
                ("length".to_owned(), bytes.len().to_string()),
            ],
            location: file.to_owned(),
            offset: aligned,
            bytes: Bytes::new(),
        });
        moved.insert(t as *const StoredTensor as usize, payload);
        Ok(())
    })?;
    Ok((tmp, moved))
}

/// Calls `f` on every stored tensor of the model, read-only (see [`for_each_tensor`]).
pub fn visit_tensors(model: &Model, f: &mut dyn FnMut(&StoredTensor) -> Result<()>) -> Result<()> {
    fn graph(g: &Graph, f: &mut dyn FnMut(&StoredTensor) -> Result<()>) -> Result<()> {
        g.initializers.iter().try_for_each(&mut *f)?;
        g.nodes_unordered()
            .flat_map(|node| &node.attributes)
            .try_for_each(|a| attribute(a, f))
    }
    fn attribute(a: &Attribute, f: &mut dyn FnMut(&StoredTensor) -> Result<()>) -> Result<()> {
        match &a.value {
            AttrValue::Tensor(t) => f(t),
            AttrValue::Tensors(ts) => ts.iter().try_for_each(&mut *f),
            AttrValue::Graph(sub) => graph(sub, f),
            AttrValue::Graphs(subs) => subs.iter().try_for_each(|s| graph(s, f)),
            _ => Ok(()),
        }
    }
    graph(&model.graph, f)?;
    for func in &model.functions {
        graph(&func.body, f)?;
        func.attribute_defaults
            .iter()
            .try_for_each(|a| attribute(a, f))?;
    }
    Ok(())
}

/// A temporary file to be renamed to `path`, with the mode the file will have: the mode of the
/// regular file it replaces (so `--in-place` keeps the input's), else `0666` less the umask, as
/// any new file gets.
fn temp_for(path: &Path) -> Result<Temp> {
    let dir = parent_dir(path);
    let mut builder = tempfile::Builder::new();
    builder.prefix(".multigather-").suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // The mode given at creation passes through the umask.
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let tmp = Temp::new(builder.tempfile_in(&dir).map_err(|e| Error::io(&dir, e))?);
    if let Ok(old) = std::fs::symlink_metadata(path) {
        if old.is_file() {
            tmp.as_file()
                .set_permissions(old.permissions())
                .map_err(|e| Error::io(path, e))?;
        }
    }
    Ok(tmp)
}

fn rename_into(tmp: Temp, path: &Path) -> Result<()> {
    tmp.persist(path).map_err(|e| Error::io(path, e))
}

/// Writes bytes to `path` atomically (temporary file, sync, rename), or straight into it when it
/// is a device or pipe.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    match Target::of(path)? {
        Target::Stream => write_stream(path, bytes),
        Target::Stdout => write_stdout(path, bytes),
        Target::Replace => rename_into(staged(path, bytes)?, path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_must_stay_inside() {
        for ok in ["w.bin", "./w.bin", "sub/w.bin"] {
            assert_eq!(check_location(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("../w.bin", "'..'"),
            ("a/../../w.bin", "'..'"),
            ("/etc/passwd", "absolute"),
            ("C:/w.bin", "drive letter"),
            ("a\\..\\w.bin", "backslash"),
            ("w\0.bin", "NUL"),
            ("", "empty"),
        ] {
            let err = check_location(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
