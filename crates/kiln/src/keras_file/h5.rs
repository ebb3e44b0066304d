//! The weights file inside a `.keras` archive (`model.weights.h5`): HDF5 through `hdf5-pure`
//! (a pure-Rust implementation: no libhdf5 to install or link). kiln writes only groups and
//! float32 datasets, which h5py (and so Keras) reads whatever HDF5 version it was built with.

use std::collections::BTreeMap;

use hdf5_pure::{File, FileBuilder, GroupBuilder};

/// A dataset's shape and float32 values.
pub(super) type Array = (Vec<usize>, Vec<f32>);

/// A group: its datasets (`name → (shape, values)`) and subgroups, by name.
#[derive(Default)]
struct Node {
    datasets: BTreeMap<String, Array>,
    groups: BTreeMap<String, Node>,
}

impl Node {
    fn group(&mut self, path: &str) -> &mut Node {
        path.split('/')
            .filter(|p| !p.is_empty())
            .fold(self, |node, part| {
                node.groups.entry(part.into()).or_default()
            })
    }

    fn fill(self, g: &mut GroupBuilder) {
        for (name, (shape, values)) in self.datasets {
            let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
            g.create_dataset(&name)
                .with_f32_data(&values)
                .with_shape(&shape);
        }
        for (name, node) in self.groups {
            let mut child = g.create_group(&name);
            node.fill(&mut child);
            g.add_group(child.finish());
        }
    }
}

/// The bytes of an HDF5 file holding `datasets` (`path → (shape, values)`) and the (possibly
/// empty) groups `groups`.
///
/// # Errors
/// The HDF5 writer's message.
pub(super) fn write(
    datasets: Vec<(String, Vec<usize>, Vec<f32>)>,
    groups: &[String],
) -> Result<Vec<u8>, String> {
    let mut root = Node::default();
    for g in groups {
        root.group(g);
    }
    for (path, shape, values) in datasets {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", &path));
        root.group(dir)
            .datasets
            .insert(name.into(), (shape, values));
    }
    let mut file = FileBuilder::new();
    for (name, node) in root.groups {
        let mut g = file.create_group(&name);
        node.fill(&mut g);
        file.add_group(g.finish());
    }
    file.finish().map_err(|e| e.to_string())
}

/// An HDF5 file read into memory.
pub(super) struct H5 {
    file: File,
}

impl H5 {
    /// Parses `bytes`.
    ///
    /// # Errors
    /// Why the bytes are not a readable HDF5 file.
    pub(super) fn parse(bytes: Vec<u8>) -> Result<H5, String> {
        File::from_bytes(bytes)
            .map(|file| H5 { file })
            .map_err(|e| format!("not a readable HDF5 file: {e}"))
    }

    /// The float32 values and shape of the dataset at `path`; `None` when there is none.
    ///
    /// # Errors
    /// A dataset that cannot be read as numbers.
    pub(super) fn f32s(&self, path: &str) -> Result<Option<Array>, String> {
        let Ok(ds) = self.file.dataset(path) else {
            return Ok(None);
        };
        let shape = ds.shape().map_err(|e| format!("{path}: {e}"))?;
        let values = ds.read_f32().map_err(|e| format!("{path}: {e}"))?;
        Ok(Some((shape.iter().map(|&d| d as usize).collect(), values)))
    }

    /// The names of the datasets in the group at `path` (empty when there is no such group).
    pub(super) fn datasets_in(&self, path: &str) -> Vec<String> {
        self.file
            .group(path)
            .and_then(|g| g.datasets())
            .unwrap_or_default()
    }

    /// The string attribute `name` of the group at `path` (`""`: the root).
    pub(super) fn attr_string(&self, path: &str, name: &str) -> Option<String> {
        let attrs = self.group_attrs(path)?;
        attrs.get(name)?.as_str().map(str::to_string)
    }

    /// The string-list attribute `name` of the group at `path`; an empty list for a numeric
    /// empty array (h5py writes a layer without weights' `weight_names` so).
    pub(super) fn attr_strings(&self, path: &str, name: &str) -> Option<Vec<String>> {
        let attrs = self.group_attrs(path)?;
        let value = attrs.get(name)?;
        match value.as_strings() {
            Some(list) => Some(list.to_vec()),
            None => value
                .as_str()
                .map(|s| vec![s.to_string()])
                .or(Some(Vec::new())),
        }
    }

    fn group_attrs(
        &self,
        path: &str,
    ) -> Option<std::collections::HashMap<String, hdf5_pure::AttrValue>> {
        let group = if path.is_empty() {
            self.file.root()
        } else {
            self.file.group(path).ok()?
        };
        group.attrs().ok()
    }
}
