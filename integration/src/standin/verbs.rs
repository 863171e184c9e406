//! The verbs that need more than one step, shared by the HTTP layer and the library API.

use std::sync::Arc;

use serde_json::Value;

use super::State;
use super::admission;
use super::resources::ResourceKind;
use super::rules;
use super::status::ApiError;

/// CREATE as the real server runs it: checks, the Priority plugin, mutating webhooks, the
/// Priority plugin again (the in-tree plugins rerun after a webhook changed the object), name
/// generation, validation, storage.
pub async fn create(
    state: &State,
    kind: &Arc<ResourceKind>,
    namespace: &str,
    mut object: Value,
) -> Result<Value, ApiError> {
    {
        let mut inner = state.store.lock();
        inner.prepare_create(kind, namespace, &mut object)?;
        if kind.is("", "pods") {
            rules::resolve_priority(&inner, &mut object)?;
        }
    }
    let object = admission::admit_create(&state.store, &state.services, kind, object).await?;
    state.store.lock().create(kind, object)
}
