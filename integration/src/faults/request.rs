//! A request read as kube-apiserver's request-info reads it: which resource (and subresource)
//! of which API group, in which namespace, named or not, and the verb.

use super::rules::Verb;

/// What one resource request is about. Non-resource paths (`/api`, `/version`, `/readyz`)
/// have none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `""` for the core group.
    pub group: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    pub verb: Verb,
}

impl Target {
    /// `plural` or `plural/subresource`, as the rules name resources.
    pub fn label(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }

    /// The resource as the API server's messages name it (`pods`, `queues.gpufair.io`).
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// Subresources of a namespace itself (`/api/v1/namespaces/NAME/status`), which are not
/// resources inside it.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// Whether a query string asks for a watch (`watch=true` or `watch=1`).
fn watch_query(query: Option<&str>) -> bool {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .any(|(key, value)| key == "watch" && matches!(value.as_ref(), "true" | "1"))
}

/// Reads a request's method, path and query; `None` for non-resource paths.
pub fn target(method: &http::Method, path: &str, query: Option<&str>) -> Option<Target> {
    let mut parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let group = match *parts.first()? {
        "api" if parts.len() >= 2 => {
            parts.drain(..2);
            String::new()
        }
        "apis" if parts.len() >= 3 => {
            let group = parts[1].to_string();
            parts.drain(..3);
            group
        }
        _ => return None,
    };
    // The old `/watch/` path prefix.
    let mut watching = watch_query(query);
    if parts.first() == Some(&"watch") {
        parts.remove(0);
        watching = true;
    }
    let mut namespace = None;
    if parts.first() == Some(&"namespaces") && parts.len() > 1 {
        namespace = Some(parts[1].to_string());
        if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
            parts.drain(..2);
        } else {
            // The namespace itself: `namespaces/NAME[/status]`.
            namespace = None;
        }
    }
    let resource = parts.first()?.to_string();
    let name = parts.get(1).map(|n| n.to_string());
    let subresource = parts.get(2).map(|s| s.to_string());
    let verb = match *method {
        http::Method::GET | http::Method::HEAD => match (&name, watching) {
            (_, true) => Verb::Watch,
            (Some(_), false) => Verb::Get,
            (None, false) => Verb::List,
        },
        http::Method::POST => Verb::Create,
        http::Method::PUT => Verb::Update,
        http::Method::PATCH => Verb::Patch,
        http::Method::DELETE if name.is_some() => Verb::Delete,
        http::Method::DELETE => Verb::DeleteCollection,
        _ => return None,
    };
    Some(Target {
        group,
        namespace,
        resource,
        name,
        subresource,
        verb,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn read(method: Method, uri: &str) -> Option<(String, Option<String>, Option<String>, Verb)> {
        let uri: http::Uri = uri.parse().unwrap();
        target(&method, uri.path(), uri.query()).map(|t| (t.label(), t.namespace, t.name, t.verb))
    }

    fn s(text: &str) -> Option<String> {
        Some(text.to_string())
    }

    #[test]
    fn core_and_group_resources_with_subresources() {
        assert_eq!(
            read(Method::PATCH, "/api/v1/namespaces/team/pods/p-1"),
            Some(("pods".into(), s("team"), s("p-1"), Verb::Patch))
        );
        assert_eq!(
            read(Method::POST, "/api/v1/namespaces/team/pods/p-1/eviction"),
            Some(("pods/eviction".into(), s("team"), s("p-1"), Verb::Create))
        );
        assert_eq!(
            read(
                Method::PATCH,
                "/apis/gpufair.io/v1alpha1/queues/team/status"
            ),
            Some(("queues/status".into(), None, s("team"), Verb::Patch))
        );
        let queue = target(
            &Method::PUT,
            "/apis/gpufair.io/v1alpha1/queues/team/status",
            None,
        )
        .unwrap();
        assert_eq!(queue.group, "gpufair.io");
        assert_eq!(queue.qualified_resource(), "queues.gpufair.io");
        assert_eq!(
            read(
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/gpufair-system/leases/gpufair-controller"
            ),
            Some((
                "leases".into(),
                s("gpufair-system"),
                s("gpufair-controller"),
                Verb::Update
            ))
        );
    }

    #[test]
    fn lists_watches_and_deletes() {
        assert_eq!(
            read(Method::GET, "/api/v1/pods?limit=500"),
            Some(("pods".into(), None, None, Verb::List))
        );
        assert_eq!(
            read(
                Method::GET,
                "/api/v1/pods?allowWatchBookmarks=true&watch=true&resourceVersion=12"
            ),
            Some(("pods".into(), None, None, Verb::Watch))
        );
        assert_eq!(
            read(Method::GET, "/api/v1/watch/namespaces/team/pods"),
            Some(("pods".into(), s("team"), None, Verb::Watch))
        );
        assert_eq!(
            read(Method::GET, "/api/v1/pods?watch=false"),
            Some(("pods".into(), None, None, Verb::List))
        );
        assert_eq!(
            read(Method::GET, "/api/v1/namespaces/team/pods/p-1"),
            Some(("pods".into(), s("team"), s("p-1"), Verb::Get))
        );
        assert_eq!(
            read(Method::DELETE, "/api/v1/namespaces/team/pods"),
            Some(("pods".into(), s("team"), None, Verb::DeleteCollection))
        );
        assert_eq!(
            read(
                Method::DELETE,
                "/apis/events.k8s.io/v1/namespaces/team/events/e-1"
            ),
            Some(("events".into(), s("team"), s("e-1"), Verb::Delete))
        );
    }

    #[test]
    fn namespaces_themselves_and_non_resource_paths() {
        assert_eq!(
            read(Method::GET, "/api/v1/namespaces/team"),
            Some(("namespaces".into(), None, s("team"), Verb::Get))
        );
        assert_eq!(
            read(Method::PUT, "/api/v1/namespaces/team/finalize"),
            Some(("namespaces/finalize".into(), None, s("team"), Verb::Update))
        );
        assert_eq!(
            read(Method::GET, "/api/v1/namespaces"),
            Some(("namespaces".into(), None, None, Verb::List))
        );
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/gpufair.io/v1alpha1",
            "/version",
            "/readyz",
            "/",
        ] {
            assert_eq!(read(Method::GET, path), None, "{path}");
        }
    }
}
