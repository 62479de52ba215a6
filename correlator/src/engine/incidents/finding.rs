//! A detector's finding: the input of the incident manager.
use vocab::kind::IncidentKind;

/// Evidence of one detector for one entity in one window.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// What is wrong (spelled on the wire as [`IncidentKind::as_str`]).
    pub kind: IncidentKind,
    pub entity: String,
    pub confidence: f64,
    pub evidence: Vec<String>,
    pub jobs: Vec<String>,
    pub runbook: String,
    /// Facts that are news for an open incident even at the same
    /// confidence (e.g. `saturated:symbol_error`): a new one is an `updated`.
    pub marks: Vec<String>,
    /// Entities whose open incidents of this kind's family this finding
    /// stands for (the ports of a switch incident): the engine resolves
    /// them into it, one fault, one incident.
    pub absorbs: Vec<String>,
}

/// The port an evidence line speaks for: a link end's "reported by PORT"
/// line or a switch incident's "member PORT: …" line.
pub fn evidence_port(e: &str) -> Option<&str> {
    e.strip_prefix("reported by ").or_else(|| {
        e.strip_prefix("member ")
            .and_then(|r| r.split_once(':'))
            .map(|(port, _)| port)
    })
}

impl Finding {
    pub fn new(kind: IncidentKind, entity: &str, confidence: f64) -> Self {
        Self {
            kind,
            entity: entity.to_string(),
            confidence,
            evidence: Vec::new(),
            jobs: Vec::new(),
            runbook: String::new(),
            marks: Vec::new(),
            absorbs: Vec::new(),
        }
    }
    pub fn with_mark(mut self, m: String) -> Self {
        self.marks.push(m);
        self
    }
    pub fn with_evidence(mut self, e: String) -> Self {
        self.evidence.push(e);
        self
    }
    pub fn with_evidence_list(mut self, e: Vec<String>) -> Self {
        self.evidence.extend(e);
        self
    }
    pub fn with_jobs(mut self, j: &[String]) -> Self {
        self.jobs = j.to_vec();
        self
    }
    pub fn with_runbook(mut self, r: String) -> Self {
        self.runbook = r;
        self
    }
}
