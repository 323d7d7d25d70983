//! The Prometheus text format, and the families the layers above keep themselves and
//! register: each is read at every scrape and written here.

use std::{
    fmt::{Display, Write},
    sync::Arc,
};

use super::histogram::Histogram;

/// A Prometheus metric type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Reads a registered family's samples at scrape time: `(labels, value)` pairs, the
/// labels as the text format spells them inside the braces (`kind="timeout"`), empty
/// for none.
pub type Samples = Box<dyn Fn() -> Vec<(String, u64)> + Send + Sync>;

/// How a family is read at scrape time.
enum Read {
    Samples(Samples),
    Histogram(Arc<Histogram>),
}

/// A family a layer keeps itself and registers, read at each scrape.
pub struct Family {
    /// `turnstile_…`.
    name: &'static str,
    kind: Kind,
    /// The `# HELP` text.
    help: &'static str,
    read: Read,
}

impl Family {
    /// A counter or gauge family whose samples `samples` reads.
    pub fn new(name: &'static str, kind: Kind, help: &'static str, samples: Samples) -> Self {
        Self {
            name,
            kind,
            help,
            read: Read::Samples(samples),
        }
    }

    /// A family of one unlabelled sample.
    pub fn single(
        name: &'static str,
        kind: Kind,
        help: &'static str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Self {
        Self::new(
            name,
            kind,
            help,
            Box::new(move || vec![(String::new(), read())]),
        )
    }

    /// An unlabelled histogram.
    pub fn histogram(name: &'static str, help: &'static str, histogram: Arc<Histogram>) -> Self {
        Self {
            name,
            kind: Kind::Histogram,
            help,
            read: Read::Histogram(histogram),
        }
    }

    /// Writes the family as it is now.
    pub(super) fn write(&self, out: &mut String) {
        match &self.read {
            Read::Samples(samples) => {
                write_family(out, (self.name, self.kind, self.help), samples());
            }
            Read::Histogram(histogram) => {
                header(out, self.name, self.kind, self.help);
                histogram.render(out, self.name, "");
            }
        }
    }
}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Family").field("name", &self.name).finish()
    }
}

/// A label value as the text format wants it: `\`, `"` and newlines escaped.
pub fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes one family: its `# HELP` and `# TYPE` lines, then a line per sample.
pub(super) fn write_family<V: Display>(
    out: &mut String,
    (name, kind, help): (&str, Kind, &str),
    samples: impl IntoIterator<Item = (String, V)>,
) {
    header(out, name, kind, help);
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// A family's `# HELP` and `# TYPE` lines.
pub(super) fn header(out: &mut String, name: &str, kind: Kind, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {}", kind.as_str());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
    }
}
