//! The fabric topology file (`serve --topology`): one link per line,
//! `LINK ENDPOINT [ENDPOINT]`, endpoints as `<host>/<hca>/<port>`; `#`
//! comments. Both ends of a link then report under the link's name.
use std::collections::HashMap;

/// A line of the topology file that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    #[error("line {line}: empty")]
    Empty { line: usize },
    #[error("line {line}: expected `LINK ENDPOINT [ENDPOINT]`, got {text:?}")]
    Shape { line: usize, text: String },
    #[error("line {line}: endpoint {endpoint:?} is not <host>/<hca>/<port>")]
    Endpoint { line: usize, endpoint: String },
    #[error("line {line}: endpoint {endpoint} already belongs to link {link}")]
    Taken {
        line: usize,
        endpoint: String,
        link: String,
    },
}

/// Parses a topology file into port entity → link name.
pub fn parse_topology(text: &str) -> Result<HashMap<String, String>, TopologyError> {
    let mut map = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let link = parts.next().ok_or(TopologyError::Empty { line: i + 1 })?;
        let ends: Vec<&str> = parts.collect();
        if ends.is_empty() || ends.len() > 2 {
            return Err(TopologyError::Shape {
                line: i + 1,
                text: line.to_string(),
            });
        }
        for e in ends {
            if e.split('/').count() != 3 {
                return Err(TopologyError::Endpoint {
                    line: i + 1,
                    endpoint: e.to_string(),
                });
            }
            if let Some(prev) = map.insert(e.to_string(), link.to_string()) {
                return Err(TopologyError::Taken {
                    line: i + 1,
                    endpoint: e.to_string(),
                    link: prev,
                });
            }
        }
    }
    Ok(map)
}
