//! Label selectors (query-string syntax and `LabelSelector` objects), field selectors, and
//! node selector terms, evaluated as the API server and scheduler evaluate them.

use serde_json::Value;

use super::status::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed `labelSelector` query parameter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits at commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn set_values(text: &str, whole: &str) -> Result<Vec<String>, ApiError> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: {whole:?}: expected a set of values in parentheses, like `key in (a,b)`"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_string())
            } else if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = part.split_once("==") {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = part.split_once('=') {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, values)) = part.split_once(" notin ") {
                Requirement::NotIn(key.trim().into(), set_values(values, part)?)
            } else if let Some((key, values)) = part.split_once(" in ") {
                Requirement::In(key.trim().into(), set_values(values, part)?)
            } else if part.contains(' ') || part.contains('(') {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {part:?}: accepted forms are key, !key, key=value, key==value, key!=value, key in (v1,v2), key notin (v1,v2)"
                )));
            } else {
                Requirement::Exists(part.to_string())
            };
            requirements.push(requirement);
        }
        Ok(Self(requirements))
    }

    /// Builds a selector from a `LabelSelector` object (`matchLabels`, `matchExpressions`).
    /// A missing or null object selects everything, as the API server reads it.
    pub fn from_object(selector: &Value, field: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        if selector.is_null() {
            return Ok(Self(requirements));
        }
        if let Some(labels) = selector["matchLabels"].as_object() {
            for (key, value) in labels {
                let value = value
                    .as_str()
                    .ok_or_else(|| format!("{field}.matchLabels.{key}: must be a string"))?;
                requirements.push(Requirement::Equals(key.clone(), value.to_string()));
            }
        }
        for (i, expression) in selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = format!("{field}.matchExpressions[{i}]");
            let key = expression["key"]
                .as_str()
                .ok_or_else(|| format!("{at}.key: required"))?
                .to_string();
            let values: Vec<String> = expression["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            let requirement = match expression["operator"].as_str() {
                Some("In") => Requirement::In(key, values),
                Some("NotIn") => Requirement::NotIn(key, values),
                Some("Exists") => Requirement::Exists(key),
                Some("DoesNotExist") => Requirement::DoesNotExist(key),
                other => {
                    return Err(format!(
                        "{at}.operator: {other:?} is not one of In, NotIn, Exists, DoesNotExist"
                    ));
                }
            };
            requirements.push(requirement);
        }
        Ok(Self(requirements))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object with `labels` (a JSON map, or null) is selected.
    pub fn matches(&self, labels: &Value) -> bool {
        let get = |key: &str| labels.get(key).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// A parsed `fieldSelector`: `field=value` / `field==value` / `field!=value` terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses and checks every field against those the resource supports (`allowed` plus
    /// `metadata.name` and `metadata.namespace`), refusing others as the real server does.
    pub fn parse(text: &str, allowed: &[&str]) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector {part:?}: accepted forms are field=value, field==value, field!=value"
                )));
            };
            let field = field.trim();
            if field != "metadata.name"
                && field != "metadata.namespace"
                && !allowed.contains(&field)
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let mut current = object;
            for part in field.split('.') {
                current = current.get(part).unwrap_or(&Value::Null);
            }
            let actual = match current {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                _ => String::new(),
            };
            (actual == *value) == *equal
        })
    }
}

fn node_requirement_matches(expression: &Value, actual: Option<&str>) -> bool {
    let values: Vec<&str> = expression["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let number = |s: &str| s.parse::<i64>().ok();
    match expression["operator"].as_str() {
        Some("In") => actual.is_some_and(|a| values.contains(&a)),
        Some("NotIn") => actual.is_none_or(|a| !values.contains(&a)),
        Some("Exists") => actual.is_some(),
        Some("DoesNotExist") => actual.is_none(),
        Some("Gt") => {
            matches!((actual.and_then(number), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a > b)
        }
        Some("Lt") => {
            matches!((actual.and_then(number), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

/// Whether `node` satisfies one `NodeSelectorTerm`: every matchExpression against its labels
/// and every matchField against its fields (only `metadata.name` exists for nodes). An empty
/// term matches nothing, as in the scheduler.
pub fn node_term_matches(term: &Value, node: &Value) -> bool {
    let expressions = term["matchExpressions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let fields = term["matchFields"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = &node["metadata"]["labels"];
    expressions.iter().all(|e| {
        let key = e["key"].as_str().unwrap_or_default();
        node_requirement_matches(e, labels.get(key).and_then(Value::as_str))
    }) && fields.iter().all(|e| {
        let actual = match e["key"].as_str() {
            Some("metadata.name") => node["metadata"]["name"].as_str(),
            _ => None,
        };
        node_requirement_matches(e, actual)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_forms() {
        let labels = json!({"app": "x", "tier": "gold"});
        let yes = [
            "app=x",
            "app==x",
            "app",
            "!missing",
            "tier in (gold, silver)",
            "tier notin (bronze),app!=y",
        ];
        for text in yes {
            assert!(
                LabelSelector::parse(text).unwrap().matches(&labels),
                "{text}"
            );
        }
        let no = [
            "app=y",
            "missing",
            "!app",
            "tier in (bronze)",
            "tier notin (gold)",
        ];
        for text in no {
            assert!(
                !LabelSelector::parse(text).unwrap().matches(&labels),
                "{text}"
            );
        }
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selector_checks_supported_fields() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let allowed = &["spec.nodeName", "status.phase"];
        assert!(
            FieldSelector::parse("spec.nodeName=n1,status.phase!=Pending", allowed)
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName=", allowed)
                .unwrap()
                .matches(&pod)
        );
        let err = FieldSelector::parse("spec.bogus=1", allowed).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(err.message, "field label not supported: spec.bogus");
    }

    #[test]
    fn node_terms_with_expressions_and_fields() {
        let node = json!({"metadata": {"name": "n1", "labels": {"pool": "a100", "gpus": "8"}}});
        let term = json!({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a100"]}, {"key": "gpus", "operator": "Gt", "values": ["4"]}],
                          "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]});
        assert!(node_term_matches(&term, &node));
        let term = json!({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]});
        assert!(!node_term_matches(&term, &node));
        assert!(!node_term_matches(&json!({}), &node));
    }
}
