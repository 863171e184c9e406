{{/*
Labels on every object: kustomize's commonLabels of deploy/ (part-of) and Helm's bookkeeping.
integration/tests/manifests/helm.rs compares the objects with deploy/'s less the Helm ones.
*/}}
{{- define "gpufair.labels" -}}
app.kubernetes.io/part-of: gpufair
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image reference: repository and tag, the chart's appVersion when the tag is empty. */}}
{{- define "gpufair.image" -}}
image: {{ printf "%s:%s" .image.repository (.image.tag | default .chart.AppVersion) | quote }}
{{- with .image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end -}}

{{/* The identity the controller runs as, which the admission policies trust. */}}
{{- define "gpufair.controllerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:gpufair-webhook
{{- end -}}

{{/* The CEL test "this pod requests a GPU resource", shared by the webhook's matchConditions
and the managed-label policy. */}}
{{- define "gpufair.requestsGpu" -}}
object.spec.containers.exists(c, has(c.resources) && (
  (has(c.resources.requests) && c.resources.requests.exists(r,
    r == 'nvidia.com/gpu' || r == 'nvidia.com/gpu.shared' || r.startsWith('nvidia.com/mig-'))) ||
  (has(c.resources.limits) && c.resources.limits.exists(r,
    r == 'nvidia.com/gpu' || r == 'nvidia.com/gpu.shared' || r.startsWith('nvidia.com/mig-')))))
|| (has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.resources) && (
  (has(c.resources.requests) && c.resources.requests.exists(r,
    r == 'nvidia.com/gpu' || r == 'nvidia.com/gpu.shared' || r.startsWith('nvidia.com/mig-'))) ||
  (has(c.resources.limits) && c.resources.limits.exists(r,
    r == 'nvidia.com/gpu' || r == 'nvidia.com/gpu.shared' || r.startsWith('nvidia.com/mig-'))))))
{{- end -}}

{{/* Fails the render with a message naming the value and the accepted forms. */}}
{{- define "gpufair.validate" -}}
{{- if not (has .Values.certificates.provider (list "gpufair-certs" "cert-manager")) -}}
{{- fail (printf "certificates.provider is %q; accepted: gpufair-certs, cert-manager" (toString .Values.certificates.provider)) -}}
{{- end -}}
{{- if and .Values.webhook.url (not (hasPrefix "https://" (toString .Values.webhook.url))) -}}
{{- fail (printf "webhook.url is %q; accepted: empty (the chart's Service), or an https:// URL" (toString .Values.webhook.url)) -}}
{{- end -}}
{{- if not (has .Values.devicePlugin.migStrategy (list "none" "mixed")) -}}
{{- fail (printf "devicePlugin.migStrategy is %q; accepted: none, mixed" (toString .Values.devicePlugin.migStrategy)) -}}
{{- end -}}
{{- end -}}

{{/* The pod of the certificate Job and of the CronJob's jobs. */}}
{{- define "gpufair.certsPod" -}}
metadata:
  labels: { app.kubernetes.io/name: gpufair-certs }
spec:
  serviceAccountName: gpufair-certs
  restartPolicy: OnFailure
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    seccompProfile: { type: RuntimeDefault }
  containers:
    - name: certs
      {{- include "gpufair.image" (dict "image" .Values.certificates.gpufairCerts.image "chart" .Chart) | nindent 6 }}
      args:
        - apply
        - --secret=gpufair-webhook-tls
        - --webhook-configuration=gpufair
        - --service=gpufair-webhook
        - --renew-before={{ .Values.certificates.gpufairCerts.renewBefore }}
      env:
        - name: GPUFAIR_CERTS_NAMESPACE
          valueFrom: { fieldRef: { fieldPath: metadata.namespace } }
      resources:
        {{- toYaml .Values.certificates.gpufairCerts.resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: { drop: ["ALL"] }
{{- end -}}
