//! A node pool's name: its Queues' `nodePool` selector as kubectl prints a label selector
//! (`gpu-type=a100`, `zone in (a,b)`, `!spot`), so the config file's `fairshare.pools` can name
//! a pool by what admins already wrote.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The selector in kubectl's form: requirements sorted by key, values sorted, joined by `,`.
/// `None` for a selector with no requirements (it selects every node).
pub fn selector_text(selector: &LabelSelector) -> Option<String> {
    let mut requirements: Vec<(String, String)> = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        requirements.push((key.clone(), format!("{key}={value}")));
    }
    for expression in selector.match_expressions.iter().flatten() {
        let key = &expression.key;
        let mut values = expression.values.clone().unwrap_or_default();
        values.sort();
        let text = match expression.operator.as_str() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({})", values.join(",")),
        };
        requirements.push((key.clone(), text));
    }
    if requirements.is_empty() {
        return None;
    }
    requirements.sort();
    Some(
        requirements
            .into_iter()
            .map(|(_, text)| text)
            .collect::<Vec<_>>()
            .join(","),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector(value: serde_json::Value) -> LabelSelector {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn prints_selectors_as_kubectl_does() {
        assert_eq!(
            selector_text(&selector(
                json!({"matchLabels": {"pool": "h100", "a": "b"}})
            )),
            Some("a=b,pool=h100".into())
        );
        assert_eq!(
            selector_text(&selector(json!({"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["b", "a"]},
                {"key": "spot", "operator": "DoesNotExist"},
                {"key": "gpu", "operator": "Exists"},
                {"key": "arch", "operator": "NotIn", "values": ["arm"]}
            ]}))),
            Some("arch notin (arm),gpu,!spot,zone in (a,b)".into())
        );
        assert_eq!(selector_text(&selector(json!({}))), None);
    }
}
