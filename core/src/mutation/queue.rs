//! Which queue a pod is charged to.

use crate::labels::QUEUE_LABEL;

use super::types::QueueFacts;

/// Read access to the known queues, however they are stored.
pub trait QueueLookup {
    fn by_name(&self, name: &str) -> Option<&QueueFacts>;
    /// Queues whose `namespaces` list `namespace`, in name order.
    fn listing_namespace(&self, namespace: &str) -> Vec<&QueueFacts>;
}

impl QueueLookup for [QueueFacts] {
    fn by_name(&self, name: &str) -> Option<&QueueFacts> {
        self.iter().find(|q| q.name == name)
    }

    fn listing_namespace(&self, namespace: &str) -> Vec<&QueueFacts> {
        let mut found: Vec<&QueueFacts> = self
            .iter()
            .filter(|q| q.admits_namespace(namespace))
            .collect();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }
}

/// Why no queue could be chosen; the text is shown to the user who created the pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    #[error(
        "label {QUEUE_LABEL}={name:?} is invalid: expected the name of an existing Queue \
         (no Queue {name:?} exists)"
    )]
    NotFound { name: String },
    #[error(
        "label {QUEUE_LABEL}={name:?} is invalid: Queue {name:?} does not admit namespace \
         {namespace:?} (its spec.namespaces: {listed})"
    )]
    Forbidden {
        name: String,
        namespace: String,
        listed: String,
    },
    #[error(
        "no Queue lists namespace {namespace:?} in spec.namespaces: set the label {QUEUE_LABEL} \
         to a Queue that admits this namespace"
    )]
    NoDefault { namespace: String },
    #[error(
        "namespace {namespace:?} is listed by several Queues ({queues}): set the label \
         {QUEUE_LABEL} to choose one"
    )]
    Ambiguous { namespace: String, queues: String },
}

/// The pod's `gpufair.io/queue` label if it has one, else the one queue listing its namespace.
pub fn resolve_queue<'a, L: QueueLookup + ?Sized>(
    label: Option<&str>,
    namespace: &str,
    queues: &'a L,
) -> Result<&'a QueueFacts, QueueError> {
    if let Some(name) = label {
        let queue = queues.by_name(name).ok_or_else(|| QueueError::NotFound {
            name: name.to_string(),
        })?;
        if !queue.admits_namespace(namespace) {
            let listed = if queue.namespaces.is_empty() {
                "none".to_string()
            } else {
                queue.namespaces.join(", ")
            };
            return Err(QueueError::Forbidden {
                name: name.to_string(),
                namespace: namespace.to_string(),
                listed,
            });
        }
        return Ok(queue);
    }
    match queues.listing_namespace(namespace).as_slice() {
        [] => Err(QueueError::NoDefault {
            namespace: namespace.to_string(),
        }),
        [only] => Ok(only),
        several => Err(QueueError::Ambiguous {
            namespace: namespace.to_string(),
            queues: several
                .iter()
                .map(|q| q.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(name: &str, namespaces: &[&str]) -> QueueFacts {
        QueueFacts {
            name: name.into(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            ..QueueFacts::default()
        }
    }

    #[test]
    fn label_wins_and_must_admit_the_namespace() {
        let queues = [queue("a", &["ml"]), queue("b", &["ml", "web"])];
        assert_eq!(
            resolve_queue(Some("b"), "ml", &queues[..]).unwrap().name,
            "b"
        );
        let err = resolve_queue(Some("a"), "web", &queues[..]).unwrap_err();
        assert!(
            err.to_string().contains("does not admit namespace \"web\""),
            "{err}"
        );
        assert!(err.to_string().contains("spec.namespaces: ml"), "{err}");
        let err = resolve_queue(Some("zz"), "ml", &queues[..]).unwrap_err();
        assert!(err.to_string().contains("gpufair.io/queue=\"zz\""), "{err}");
    }

    #[test]
    fn namespace_default_must_be_unique() {
        let queues = [queue("a", &["ml"]), queue("b", &["ml", "web"])];
        assert_eq!(resolve_queue(None, "web", &queues[..]).unwrap().name, "b");
        let err = resolve_queue(None, "ml", &queues[..]).unwrap_err();
        assert_eq!(
            err,
            QueueError::Ambiguous {
                namespace: "ml".into(),
                queues: "a, b".into()
            }
        );
        let err = resolve_queue(None, "other", &queues[..]).unwrap_err();
        assert!(matches!(err, QueueError::NoDefault { .. }));
    }
}
