//! The object store: every object by resource, namespace and name; one resourceVersion counter
//! for all of them (as etcd's revision); a bounded history of changes that watches resume from;
//! and a broadcast of each change to open watches.
//!
//! Writes check optimistic concurrency (409 on a stale `resourceVersion`), split spec from
//! status for resources with a status subresource, bump `generation` when anything but
//! metadata and status changes, and leave resourceVersion alone on no-op updates, as the real
//! server does. Kind-specific rules (pods, priority classes, webhook configurations) live in
//! [`super::rules`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::journal::{Entry, Journal, JournalId};
use super::resources::{Registry, ResourceKind};
use super::rules;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as stored in the history and sent to watches.
#[derive(Debug, Clone)]
pub struct Change {
    pub resource_version: u64,
    /// [`ResourceKind::key`] of the changed object's resource.
    pub resource: String,
    pub namespace: String,
    pub event_type: EventType,
    pub object: Value,
    /// The object before a modification, so watches with selectors can turn a change that
    /// moves an object in or out of their selection into ADDED or DELETED.
    pub previous: Option<Value>,
}

/// Which part of an object a write targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Main,
    Status,
    /// The stand-in's own controllers (scheduler binding, kubelet): spec and status together,
    /// without the rules that bind clients.
    System,
}

/// Graceful-deletion options of a DELETE.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
}

pub type Key = (String, String);

/// The mutable state, behind one lock.
pub struct Inner {
    pub registry: Registry,
    resource_version: u64,
    objects: HashMap<String, BTreeMap<Key, Value>>,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Watches from a version at or below this one are answered 410 Gone.
    compacted_through: u64,
    next_uid: u64,
    uid_seed: u64,
    changes: broadcast::Sender<Arc<Change>>,
    revision: watch::Sender<u64>,
    /// What changed since each of the stand-in's controllers last looked.
    journals: Vec<Journal>,
}

/// The store shared by the HTTP layer, the scheduler, the kubelet and the library API.
pub struct Store {
    inner: Mutex<Inner>,
    changes: broadcast::Sender<Arc<Change>>,
    revision: watch::Receiver<u64>,
}

/// RFC 3339 with second precision, as `metav1.Time` is written.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Seconds since the epoch of an RFC 3339 time written by [`now_rfc3339`] (or a client).
pub fn parse_time(text: &str) -> Option<f64> {
    text.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond() as f64 / 1000.0)
}

pub fn now_seconds() -> f64 {
    jiff::Timestamp::now().as_millisecond() as f64 / 1000.0
}

fn format_time(seconds: f64) -> String {
    jiff::Timestamp::from_millisecond((seconds * 1000.0) as i64)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| now_rfc3339())
}

/// A random 64-bit value from the standard library's per-process hash keys: enough to make
/// UIDs and tokens of separate runs differ, without a random-number crate.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.finish()
}

pub fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn namespace_of(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or_default()
}

pub fn resource_version_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// DNS-1123 subdomain: what the API server requires of most object names.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

impl Store {
    pub fn new(registry: Registry, history_limit: usize) -> Self {
        let (changes, _) = broadcast::channel(8192);
        let (revision_tx, revision) = watch::channel(0);
        let inner = Inner {
            registry,
            resource_version: 1,
            objects: HashMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted_through: 0,
            next_uid: 1,
            uid_seed: random_u64(),
            changes: changes.clone(),
            revision: revision_tx,
            journals: Vec::new(),
        };
        Self {
            inner: Mutex::new(inner),
            changes,
            revision,
        }
    }

    /// The state, locked. A poisoned lock only means a panic in a test's closure; the maps are
    /// still consistent, so they are used as they are.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that sees the store's revision move on every change (for the scheduler and
    /// kubelet loops and for waits in tests).
    pub fn revisions(&self) -> watch::Receiver<u64> {
        self.revision.clone()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.changes.subscribe()
    }
}

impl Inner {
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    pub fn kind(&self, group: &str, plural: &str) -> Result<Arc<ResourceKind>, ApiError> {
        self.registry
            .kinds()
            .iter()
            .find(|k| k.is(group, plural))
            .cloned()
            .ok_or_else(|| ApiError::not_found_path(&format!("{group}/{plural}")))
    }

    fn bucket(&self, kind: &ResourceKind) -> Option<&BTreeMap<Key, Value>> {
        self.objects.get(&kind.key())
    }

    pub fn get(&self, kind: &ResourceKind, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let namespace = if kind.namespaced { namespace } else { "" };
        self.bucket(kind)
            .and_then(|b| b.get(&(namespace.to_string(), name.to_string())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&kind.group, &kind.plural, name))
    }

    pub fn try_get(&self, kind: &ResourceKind, namespace: &str, name: &str) -> Option<&Value> {
        let namespace = if kind.namespaced { namespace } else { "" };
        self.bucket(kind)
            .and_then(|b| b.get(&(namespace.to_string(), name.to_string())))
    }

    /// Every object of `kind` (in `namespace` when given), in namespace/name order. A
    /// namespace is a range of the ordered keys, so listing one costs its own objects only.
    pub fn iter<'a>(
        &'a self,
        kind: &ResourceKind,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        let start = (namespace.unwrap_or_default().to_string(), String::new());
        self.bucket(kind)
            .into_iter()
            .flat_map(move |b| b.range(start.clone()..))
            .take_while(move |((ns, _), _)| namespace.is_none_or(|n| n == ns))
            .map(|(_, v)| v)
    }

    /// Starts a journal of changes to `resources` (see [`super::journal`]) for one reader,
    /// holding every object of them that exists now, so the reader's first pass sees them all.
    pub fn open_journal(&mut self, resources: &[&str]) -> JournalId {
        let mut journal = Journal::new(resources);
        for (resource, bucket) in &self.objects {
            for key in bucket.keys() {
                journal.note(resource, key);
            }
        }
        self.journals.push(journal);
        JournalId(self.journals.len() - 1)
    }

    /// The keys changed since the last take from this journal.
    pub fn take_journal(&mut self, id: JournalId) -> std::collections::BTreeSet<Entry> {
        self.journals
            .get_mut(id.0)
            .map(Journal::take)
            .unwrap_or_default()
    }

    pub fn list(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Value> {
        self.iter(kind, namespace)
            .filter(|o| labels.matches(&o["metadata"]["labels"]) && fields.matches(o))
            .cloned()
            .collect()
    }

    fn next_version(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    fn record(
        &mut self,
        kind: &ResourceKind,
        event_type: EventType,
        object: Value,
        previous: Option<Value>,
    ) {
        if !self.journals.is_empty() {
            let resource = kind.key();
            let key = (
                namespace_of(&object).to_string(),
                name_of(&object).to_string(),
            );
            for journal in &mut self.journals {
                journal.note(&resource, &key);
            }
        }
        let change = Arc::new(Change {
            resource_version: resource_version_of(&object),
            resource: kind.key(),
            namespace: namespace_of(&object).to_string(),
            event_type,
            object,
            previous,
        });
        self.history.push_back(Arc::clone(&change));
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted_through = self.compacted_through.max(old.resource_version);
            }
        }
        let _ = self.changes.send(change);
        self.revision.send_replace(self.resource_version);
    }

    /// Forgets the whole history, so every watch resuming from an earlier version gets
    /// 410 Gone (what etcd compaction does).
    pub fn compact(&mut self) {
        self.compacted_through = self.resource_version;
        self.history.clear();
    }

    pub fn set_history_limit(&mut self, limit: usize) {
        self.history_limit = limit.max(1);
    }

    /// The changes after `since` for a watch, or 410 Gone when they are no longer kept.
    pub fn changes_since(&self, since: u64) -> Result<Vec<Arc<Change>>, ApiError> {
        if since < self.compacted_through {
            return Err(ApiError::gone(format!(
                "too old resource version: {since} ({})",
                self.compacted_through + 1
            )));
        }
        Ok(self
            .history
            .iter()
            .filter(|c| c.resource_version > since)
            .cloned()
            .collect())
    }

    fn new_uid(&mut self) -> String {
        let n = self.next_uid;
        self.next_uid += 1;
        let seed = self.uid_seed;
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (seed >> 32) as u32,
            (seed >> 16) as u16,
            (seed as u16) & 0xfff,
            (n >> 48) as u16 & 0xfff,
            n & 0xffff_ffff_ffff
        )
    }

    fn generated_name(&mut self, prefix: &str) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut value = random_u64() ^ self.next_uid;
        let suffix: String = (0..5)
            .map(|_| {
                let c = ALPHABET[(value % ALPHABET.len() as u64) as usize] as char;
                value /= ALPHABET.len() as u64;
                c
            })
            .collect();
        format!("{prefix}{suffix}")
    }

    /// Checks a new object's name (or `generateName`) and namespace and sets its
    /// `apiVersion` and `kind`; the name itself is generated at [`Inner::create`], after
    /// admission, as the real server does.
    pub fn prepare_create(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        object: &mut Value,
    ) -> Result<(), ApiError> {
        if !object.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} create must be a JSON object",
                kind.kind
            )));
        }
        if object["metadata"].is_null() {
            object["metadata"] = json!({});
        }
        let metadata = &object["metadata"];
        let name = metadata["name"].as_str().unwrap_or_default().to_string();
        let generated = metadata["generateName"]
            .as_str()
            .is_some_and(|p| !p.is_empty());
        if name.is_empty() && !generated {
            return Err(ApiError::invalid(
                &kind.kind,
                "",
                &[(
                    "metadata.name".into(),
                    "Required value: name or generateName is required".into(),
                )],
            ));
        }
        if !name.is_empty() && !valid_name(&name) {
            return Err(ApiError::invalid(
                &kind.kind,
                &name,
                &[(
                    "metadata.name".into(),
                    format!(
                        "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                    ),
                )],
            ));
        }
        if kind.namespaced {
            let body_namespace = namespace_of(object);
            if !body_namespace.is_empty() && body_namespace != namespace {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            let namespaces = self.kind("", "namespaces")?;
            if self.try_get(&namespaces, "", namespace).is_none() {
                return Err(ApiError::not_found("", "namespaces", namespace));
            }
            object["metadata"]["namespace"] = json!(namespace);
        } else if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("namespace");
        }
        object["apiVersion"] = json!(kind.api_version());
        object["kind"] = json!(kind.kind);
        Ok(())
    }

    /// Stores a new object (after [`Inner::prepare_create`] and admission).
    pub fn create(&mut self, kind: &ResourceKind, mut object: Value) -> Result<Value, ApiError> {
        if name_of(&object).is_empty() {
            let prefix = object["metadata"]["generateName"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let name = self.generated_name(&prefix);
            if !valid_name(&name) {
                return Err(ApiError::invalid(
                    &kind.kind,
                    &name,
                    &[(
                        "metadata.generateName".into(),
                        format!(
                            "Invalid value: {prefix:?}: a lowercase RFC 1123 subdomain prefix is required"
                        ),
                    )],
                ));
            }
            object["metadata"]["name"] = json!(name);
        }
        let name = name_of(&object).to_string();
        let namespace = namespace_of(&object).to_string();
        if self.try_get(kind, &namespace, &name).is_some() {
            return Err(ApiError::already_exists(&kind.group, &kind.plural, &name));
        }
        rules::on_create(self, kind, &mut object)?;
        let uid = self.new_uid();
        let version = self.next_version();
        let metadata = object["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        metadata.insert("uid".into(), json!(uid));
        metadata.insert("resourceVersion".into(), json!(version.to_string()));
        metadata.insert("creationTimestamp".into(), json!(now_rfc3339()));
        metadata.insert("generation".into(), json!(1));
        metadata.remove("deletionTimestamp");
        metadata.remove("deletionGracePeriodSeconds");
        self.objects
            .entry(kind.key())
            .or_default()
            .insert((namespace, name), object.clone());
        self.record(kind, EventType::Added, object.clone(), None);
        Ok(object)
    }

    /// Replaces an object (PUT, or the result of a patch). `new` carries the client's
    /// `resourceVersion`, checked against the stored one when present.
    pub fn update(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        mut new: Value,
        target: Target,
    ) -> Result<Value, ApiError> {
        let old = self.get(kind, namespace, name)?;
        if !new.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} update must be a JSON object",
                kind.kind
            )));
        }
        let body_name = name_of(&new);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if kind.namespaced {
            let body_namespace = namespace_of(&new);
            if !body_namespace.is_empty() && body_namespace != namespace {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        match new["metadata"]["resourceVersion"].as_str() {
            Some(rv) if !rv.is_empty() => {
                let wanted: u64 = rv.parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "metadata.resourceVersion {rv:?} is not a resource version this server issued"
                    ))
                })?;
                if wanted != resource_version_of(&old) {
                    return Err(ApiError::conflict(&kind.group, &kind.plural, name));
                }
            }
            _ => {}
        }
        if kind.status_subresource {
            match target {
                Target::Main => {
                    new["status"] = old["status"].clone();
                }
                Target::Status => {
                    let status = new["status"].clone();
                    new = old.clone();
                    new["status"] = status;
                }
                Target::System => {}
            }
        }
        if new["status"].is_null()
            && old["status"].is_null()
            && let Some(map) = new.as_object_mut()
        {
            map.remove("status");
        }
        // Fields only the server sets.
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "name",
            "namespace",
            "resourceVersion",
        ] {
            match old["metadata"].get(field) {
                Some(value) => new["metadata"][field] = value.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(field);
                    }
                }
            }
        }
        new["apiVersion"] = json!(kind.api_version());
        new["kind"] = json!(kind.kind);
        match target {
            Target::Main => rules::on_update(self, kind, &old, &mut new)?,
            Target::Status => rules::on_status_update(kind, &old, &new)?,
            Target::System => {}
        }
        if new == old {
            return Ok(old);
        }
        let spec_changed = {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    m.remove("metadata");
                    m.remove("status");
                }
                v
            };
            strip(&new) != strip(&old)
        };
        if spec_changed {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
            new["metadata"]["generation"] = json!(generation);
        }
        let finalized = !new["metadata"]["deletionTimestamp"].is_null()
            && new["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty)
            && !(kind.is("", "pods") && rules::pod_awaits_kubelet(&new));
        let version = self.next_version();
        new["metadata"]["resourceVersion"] = json!(version.to_string());
        let key = (
            if kind.namespaced { namespace } else { "" }.to_string(),
            name.to_string(),
        );
        if finalized {
            if let Some(bucket) = self.objects.get_mut(&kind.key()) {
                bucket.remove(&key);
            }
            self.record(kind, EventType::Deleted, new.clone(), Some(old));
        } else {
            self.objects
                .entry(kind.key())
                .or_default()
                .insert(key, new.clone());
            self.record(kind, EventType::Modified, new.clone(), Some(old));
        }
        Ok(new)
    }

    /// Reads the object, lets `change` compute its new form, and writes it under the same
    /// lock: the patch verbs. The resourceVersion the change leaves in the object is the
    /// precondition (unchanged means "the version I read").
    pub fn modify(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        target: Target,
        change: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        let old = self.get(kind, namespace, name)?;
        let new = change(&old)?;
        self.update(kind, namespace, name, new, target)
    }

    /// DELETE: immediate, or graceful for pods on a node and objects with finalizers.
    pub fn delete(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let old = self.get(kind, namespace, name)?;
        check_preconditions(&old, options)?;
        if let Some(grace) = options.grace_period_seconds
            && grace < 0
        {
            return Err(ApiError::invalid(
                &kind.kind,
                name,
                &[(
                    "gracePeriodSeconds".into(),
                    format!("Invalid value: {grace}: must be >= 0"),
                )],
            ));
        }
        let grace = if kind.is("", "pods") {
            rules::pod_deletion_grace(&old, options.grace_period_seconds)
        } else {
            0
        };
        let has_finalizers = old["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if grace == 0 && !has_finalizers {
            return Ok(self.remove_now(kind, namespace, name).unwrap_or(old));
        }
        let mut new = old.clone();
        let deadline = now_seconds() + grace as f64;
        let already = old["metadata"]["deletionTimestamp"]
            .as_str()
            .and_then(parse_time);
        // A second delete may shorten the grace period, never lengthen it.
        if already.is_none_or(|t| deadline < t) {
            new["metadata"]["deletionTimestamp"] = json!(format_time(deadline));
            new["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        }
        if new == old {
            return Ok(old);
        }
        let version = self.next_version();
        new["metadata"]["resourceVersion"] = json!(version.to_string());
        let key = (
            if kind.namespaced { namespace } else { "" }.to_string(),
            name.to_string(),
        );
        self.objects
            .entry(kind.key())
            .or_default()
            .insert(key, new.clone());
        self.record(kind, EventType::Modified, new.clone(), Some(old));
        Ok(new)
    }

    /// Removes an object now (a zero grace period, or the kubelet confirming a pod is gone).
    pub fn remove_now(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let key = (
            if kind.namespaced { namespace } else { "" }.to_string(),
            name.to_string(),
        );
        let mut object = self.objects.get_mut(&kind.key())?.remove(&key)?;
        let version = self.next_version();
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        self.record(kind, EventType::Deleted, object.clone(), None);
        Some(object)
    }
}

/// A delete's (or eviction's) preconditions against the stored object: 409 when the UID or
/// resourceVersion differs.
pub fn check_preconditions(old: &Value, options: &DeleteOptions) -> Result<(), ApiError> {
    if let Some(uid) = &options.precondition_uid
        && old["metadata"]["uid"].as_str() != Some(uid.as_str())
    {
        return Err(ApiError::conflict_message(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            old["metadata"]["uid"].as_str().unwrap_or_default()
        )));
    }
    if let Some(rv) = &options.precondition_resource_version
        && old["metadata"]["resourceVersion"].as_str() != Some(rv.as_str())
    {
        return Err(ApiError::conflict_message(format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
            old["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
        )));
    }
    Ok(())
}

/// A store of the built-in kinds holding namespace `default`, for the stand-in's unit tests.
#[cfg(test)]
pub(crate) fn with_default_namespace(history: usize) -> Store {
    let store = Store::new(Registry::builtin(), history);
    {
        let mut inner = store.lock();
        let namespaces = inner.kind("", "namespaces").unwrap();
        let mut ns = json!({"metadata": {"name": "default"}});
        inner.prepare_create(&namespaces, "", &mut ns).unwrap();
        inner.create(&namespaces, ns).unwrap();
    }
    store
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (Store, Arc<ResourceKind>) {
        let store = with_default_namespace(3);
        let leases = store.lock().kind("coordination.k8s.io", "leases").unwrap();
        (store, leases)
    }

    fn lease(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"holderIdentity": "a"}})
    }

    #[test]
    fn stale_update_conflicts_and_noop_keeps_version() {
        let (store, leases) = store();
        let mut inner = store.lock();
        let mut object = lease("l");
        inner
            .prepare_create(&leases, "default", &mut object)
            .unwrap();
        let created = inner.create(&leases, object).unwrap();
        let mut changed = created.clone();
        changed["spec"]["holderIdentity"] = json!("b");
        let updated = inner
            .update(&leases, "default", "l", changed.clone(), Target::Main)
            .unwrap();
        assert_eq!(updated["metadata"]["generation"], 2);
        let err = inner
            .update(&leases, "default", "l", changed, Target::Main)
            .unwrap_err();
        assert_eq!(err.code, 409);
        let same = inner
            .update(&leases, "default", "l", updated.clone(), Target::Main)
            .unwrap();
        assert_eq!(
            same["metadata"]["resourceVersion"],
            updated["metadata"]["resourceVersion"]
        );
    }

    #[test]
    fn history_is_bounded_and_older_versions_are_gone() {
        let (store, leases) = store();
        let mut inner = store.lock();
        let start = inner.resource_version();
        for i in 0..5 {
            let mut object = lease(&format!("l{i}"));
            inner
                .prepare_create(&leases, "default", &mut object)
                .unwrap();
            inner.create(&leases, object).unwrap();
        }
        assert_eq!(inner.changes_since(start).unwrap_err().code, 410);
        assert_eq!(
            inner
                .changes_since(inner.resource_version() - 2)
                .unwrap()
                .len(),
            2
        );
        inner.compact();
        assert_eq!(
            inner
                .changes_since(inner.resource_version() - 1)
                .unwrap_err()
                .code,
            410
        );
        assert!(
            inner
                .changes_since(inner.resource_version())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn namespaced_objects_need_their_namespace() {
        let (store, leases) = store();
        let mut inner = store.lock();
        let err = inner
            .prepare_create(&leases, "absent", &mut lease("l"))
            .unwrap_err();
        assert_eq!(err.code, 404);
        assert_eq!(err.message, "namespaces \"absent\" not found");
        let err = inner
            .prepare_create(&leases, "default", &mut lease("Bad_Name"))
            .unwrap_err();
        assert_eq!(err.code, 422);
    }
}
