//! cert-manager's `Certificate` and `Issuer` (cert-manager.io/v1), as far as the cert-manager
//! overlay uses them. There are no k8s-openapi types for them; these follow cert-manager's API
//! reference, refuse unknown fields, and so catch a misspelt field the same way.
#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Certificate {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: CertificateSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CertificateSpec {
    pub secret_name: String,
    pub issuer_ref: IssuerRef,
    #[serde(default)]
    pub common_name: Option<String>,
    #[serde(default)]
    pub dns_names: Vec<String>,
    #[serde(default, rename = "isCA")]
    pub is_ca: bool,
    #[serde(default)]
    pub duration: Option<String>,
    #[serde(default)]
    pub renew_before: Option<String>,
    #[serde(default)]
    pub private_key: Option<PrivateKey>,
    #[serde(default)]
    pub usages: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IssuerRef {
    pub name: String,
    pub kind: Option<String>,
    pub group: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PrivateKey {
    pub algorithm: Option<String>,
    pub size: Option<u32>,
    pub rotation_policy: Option<String>,
    pub encoding: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Issuer {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: IssuerSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IssuerSpec {
    #[serde(default)]
    pub self_signed: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    pub ca: Option<CaIssuer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CaIssuer {
    pub secret_name: String,
}
