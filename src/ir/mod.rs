//! The in-memory model: what every module except [`crate::proto`] works on.
//!
//! A [`Model`] holds the main [`Graph`], model-local [`Function`]s and the model's metadata. Graphs
//! hold [`Node`]s on a petgraph `StableGraph`; subgraphs of `If`/`Loop`/`Scan` are graphs held by
//! node attributes; function bodies are graphs too. Everything the file contained is kept, so a
//! model saved without changes decodes to the same protobuf message it was read from.

mod attr;
mod calls;
mod graph;
mod naming;
mod stored;
mod types;
mod value;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use bytes::Bytes;

pub use attr::{AttrValue, Attribute};
pub use calls::CallGraph;
pub use naming::FunctionKey;
/// A map keyed by value names, for the indexes hashed on every edit and lookup (see the
/// `foldhash` entry of Cargo.toml).
pub(crate) type NameMap<V> = std::collections::HashMap<String, V, foldhash::fast::RandomState>;

pub use graph::{Graph, Node, NodeId, NodeMut, QuantAnnotation, SparseInitializer};
pub use stored::{
    element_count, stored_to_tensor, tensor_to_stored, ExternalData, Payload, StoredTensor,
};
pub use types::{broadcast_dim, same_dim, Dim, Shape, TensorType, Type, TypeKind, ValueInfo};
pub use value::{MapKeys, Sequence, SequenceOfMaps, Value};

use crate::error::{Error, Result};

/// An operator set import (`OperatorSetIdProto`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpsetImport {
    /// `None` when the file leaves the domain unset (the default domain).
    pub domain: Option<String>,
    pub version: i64,
}

impl OpsetImport {
    /// The domain, with unset meaning the default domain `""`.
    pub fn domain(&self) -> &str {
        self.domain.as_deref().unwrap_or("")
    }
}

/// The opset version imported for `domain` (`""` and `ai.onnx` are the same domain).
pub fn opset_version(imports: &[OpsetImport], domain: &str) -> Option<i64> {
    let domain = canonical_domain(domain);
    imports
        .iter()
        .find(|o| canonical_domain(o.domain()) == domain)
        .map(|o| o.version)
}

/// The one spelling of a domain: ONNX's default domain is `""`, also written `ai.onnx`; every
/// other domain is itself. Everything that compares or looks up domains goes through this.
///
/// # Example
/// ```
/// use multigather::ir::canonical_domain;
/// assert_eq!(canonical_domain("ai.onnx"), "");
/// assert_eq!(canonical_domain("ai.onnx.ml"), "ai.onnx.ml");
/// ```
pub fn canonical_domain(domain: &str) -> &str {
    if domain == "ai.onnx" {
        ""
    } else {
        domain
    }
}

/// Whether `domain` is ONNX's default domain (`""` or `ai.onnx`).
///
/// # Example
/// ```
/// use multigather::ir::is_onnx_domain;
/// assert!(is_onnx_domain("") && is_onnx_domain("ai.onnx") && !is_onnx_domain("com.microsoft"));
/// ```
pub fn is_onnx_domain(domain: &str) -> bool {
    canonical_domain(domain).is_empty()
}

/// The domain as messages name it: the default domain is `ai.onnx`.
///
/// # Example
/// ```
/// use multigather::ir::display_domain;
/// assert_eq!((display_domain(""), display_domain("multigather")), ("ai.onnx", "multigather"));
/// ```
pub fn display_domain(domain: &str) -> &str {
    if domain.is_empty() {
        "ai.onnx"
    } else {
        domain
    }
}

/// A model-local function (`FunctionProto`). Its body is a [`Graph`] whose inputs and outputs are
/// untyped declarations.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    pub domain: String,
    pub overload: Option<String>,
    /// Names of the attributes the function takes without defaults.
    pub attributes: Vec<String>,
    /// Attributes the function takes with default values.
    pub attribute_defaults: Vec<Attribute>,
    pub opset_imports: Vec<OpsetImport>,
    pub body: Graph,
    pub doc_string: Option<String>,
    pub metadata_props: Vec<(String, String)>,
}

/// A whole model (`ModelProto`). Two models are equal when their contents are, wherever they were
/// loaded from.
#[derive(Clone, Debug)]
pub struct Model {
    pub ir_version: Option<i64>,
    pub opset_imports: Vec<OpsetImport>,
    pub producer_name: Option<String>,
    pub producer_version: Option<String>,
    pub domain: Option<String>,
    pub model_version: Option<i64>,
    pub doc_string: Option<String>,
    pub metadata_props: Vec<(String, String)>,
    pub graph: Graph,
    pub functions: Vec<Function>,
    /// `training_info`, kept encoded: passes do not look inside training graphs.
    pub training_info: Vec<Bytes>,
    /// `configuration` (device configurations), kept encoded.
    pub configuration: Vec<Bytes>,
    /// Directory the model was loaded from, against which external data locations resolve.
    pub base_dir: Option<PathBuf>,
    /// The file the model was loaded from, which a save never uses for external data.
    pub source_file: Option<PathBuf>,
}

impl PartialEq for Model {
    fn eq(&self, other: &Model) -> bool {
        let Model {
            ir_version,
            opset_imports,
            producer_name,
            producer_version,
            domain,
            model_version,
            doc_string,
            metadata_props,
            graph,
            functions,
            training_info,
            configuration,
            base_dir: _,
            source_file: _,
        } = self;
        *ir_version == other.ir_version
            && *opset_imports == other.opset_imports
            && *producer_name == other.producer_name
            && *producer_version == other.producer_version
            && *domain == other.domain
            && *model_version == other.model_version
            && *doc_string == other.doc_string
            && *metadata_props == other.metadata_props
            && *graph == other.graph
            && *functions == other.functions
            && *training_info == other.training_info
            && *configuration == other.configuration
    }
}

impl Model {
    /// A model around `graph` importing the given default-domain opset, IR version 8.
    ///
    /// # Example
    /// ```
    /// use multigather::ir::{Graph, Model};
    /// let m = Model::new(Graph::new("main"), 13);
    /// assert_eq!(m.opset("") , Some(13));
    /// ```
    pub fn new(graph: Graph, opset: i64) -> Model {
        Model {
            ir_version: Some(8),
            opset_imports: vec![OpsetImport {
                domain: Some(String::new()),
                version: opset,
            }],
            producer_name: None,
            producer_version: None,
            domain: None,
            model_version: None,
            doc_string: None,
            metadata_props: Vec::new(),
            graph,
            functions: Vec::new(),
            training_info: Vec::new(),
            configuration: Vec::new(),
            base_dir: None,
            source_file: None,
        }
    }

    /// The opset version the model imports for `domain`.
    pub fn opset(&self, domain: &str) -> Option<i64> {
        opset_version(&self.opset_imports, domain)
    }

    /// Imports `domain` at `version` unless the model already imports the domain.
    pub fn ensure_opset(&mut self, domain: &str, version: i64) {
        if self.opset(domain).is_none() {
            self.opset_imports.push(OpsetImport {
                domain: Some(domain.to_owned()),
                version,
            });
        }
    }

    /// Checks the model's invariants: every graph and function body valid, every node's domain
    /// imported, function names unique.
    pub fn validate(&self) -> Result<()> {
        // Built once: a model may define tens of thousands of functions.
        let local: HashSet<(&str, &str)> = self
            .functions
            .iter()
            .map(|f| (f.domain.as_str(), f.name.as_str()))
            .collect();
        check_domains(&self.graph, &self.opset_imports, &local)?;
        self.graph.validate()?;
        let mut seen = HashSet::new();
        for f in &self.functions {
            if !seen.insert(f.key()) {
                return Err(Error::InvalidModel(format!(
                    "function '{}' (domain '{}') is defined twice",
                    f.name, f.domain
                )));
            }
            check_domains(&f.body, &f.opset_imports, &local)?;
            f.body.validate()?;
        }
        Ok(())
    }

    /// Number of nodes per qualified op type in the main graph, its subgraphs and the functions.
    pub fn op_histogram(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        self.graph.op_histogram(&mut counts);
        for f in &self.functions {
            f.body.op_histogram(&mut counts);
        }
        counts
    }

    /// Every value and node name in the model, for generating fresh ones.
    pub fn names(&self) -> HashSet<String> {
        let mut names = HashSet::new();
        self.graph.collect_names(&mut names);
        for f in &self.functions {
            f.body.collect_names(&mut names);
        }
        names
    }
}

/// Every node's domain must be imported by the graph's model or function, or name a local function.
fn check_domains(
    graph: &Graph,
    imports: &[OpsetImport],
    functions: &HashSet<(&str, &str)>,
) -> Result<()> {
    for node in graph.nodes_unordered() {
        let is_function = functions.contains(&(node.domain.as_str(), node.op_type.as_str()));
        if !is_function && opset_version(imports, &node.domain).is_none() {
            return Err(Error::node(
                &node.name,
                &node.qualified_op(),
                format!(
                    "domain '{}' is not imported by any opset_import",
                    node.domain
                ),
            ));
        }
        for g in node.subgraphs() {
            check_domains(g, imports, functions)?;
        }
    }
    Ok(())
}

/// Generates names that clash with nothing in a model.
///
/// # Example
/// ```
/// use multigather::ir::UniqueNames;
/// let mut names = UniqueNames::new(["x".to_string(), "x_1".to_string()]);
/// assert_eq!(names.fresh("x"), "x_2");
/// assert_eq!(names.fresh("y"), "y");
/// assert_eq!(names.fresh("y"), "y_1");
/// ```
#[derive(Clone, Debug, Default)]
pub struct UniqueNames {
    used: HashSet<String, foldhash::fast::RandomState>,
    /// Next suffix to try per base, so generating many names from one base stays linear.
    next: NameMap<usize>,
}

impl UniqueNames {
    /// A generator that avoids `used`.
    pub fn new(used: impl IntoIterator<Item = String>) -> UniqueNames {
        UniqueNames {
            used: used.into_iter().collect(),
            next: Default::default(),
        }
    }

    /// A generator that avoids every value and node name of `model` (as [`Model::names`]).
    pub fn for_model(model: &Model) -> UniqueNames {
        let mut used = HashSet::default();
        model.graph.collect_names(&mut used);
        for f in &model.functions {
            f.body.collect_names(&mut used);
        }
        UniqueNames {
            used,
            next: Default::default(),
        }
    }

    /// `base` if unused, else `base_N` for the smallest free N; the name is then taken.
    pub fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_owned();
        let n = self.next.entry(base.to_owned()).or_insert(1);
        while self.used.contains(&name) || name.is_empty() {
            name = format!("{base}_{n}");
            *n += 1;
        }
        self.used.insert(name.clone());
        name
    }
}
