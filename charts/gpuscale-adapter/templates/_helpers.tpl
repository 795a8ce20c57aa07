{{/*
Names. With the release named gpuscale-adapter (docs/install.md) every object has the name the kustomize base gives
it; another release name is prefixed, as Helm charts do, so that two releases never share a cluster-wide name.
*/}}
{{- define "gpuscale-adapter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuscale-adapter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "gpuscale-adapter.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The cluster-wide roles that are about the metrics APIs rather than the adapter: gpuscale-metrics-reader. */}}
{{- define "gpuscale-adapter.prefix" -}}
{{- include "gpuscale-adapter.fullname" . | trimSuffix "-adapter" -}}
{{- end -}}

{{- define "gpuscale-adapter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "gpuscale-adapter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpuscale-adapter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The pods' selector: stable across upgrades (a Deployment's selector cannot change). */}}
{{- define "gpuscale-adapter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuscale-adapter.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* Labels of every object: the base's (name, component, part-of), Helm's standard ones, then customLabels. */}}
{{- define "gpuscale-adapter.labelMap" -}}
{{- $labels := dict
  "app.kubernetes.io/name" (include "gpuscale-adapter.name" .)
  "app.kubernetes.io/component" "adapter"
  "app.kubernetes.io/part-of" "gpuscale"
  "app.kubernetes.io/instance" .Release.Name
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/managed-by" .Release.Service
  "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-")
-}}
{{- toYaml (merge (dict) $labels (.Values.customLabels | default dict)) -}}
{{- end -}}

{{/*
An object's metadata: name, namespace (when "namespaced"), labels, and annotations ("annotations", then
customAnnotations). Called with (dict "ctx" $ "name" ... "namespaced" true "labels" {...} "annotations" {...}).
*/}}
{{- define "gpuscale-adapter.metadata" -}}
{{- $ctx := .ctx -}}
name: {{ .name | quote }}
{{- if .namespaced }}
namespace: {{ include "gpuscale-adapter.namespace" $ctx | quote }}
{{- end }}
labels:
  {{- $labels := fromYaml (include "gpuscale-adapter.labelMap" $ctx) }}
  {{- toYaml (merge (dict) $labels (.labels | default dict)) | nindent 2 }}
{{- $annotations := merge (dict) (.annotations | default dict) ($ctx.Values.customAnnotations | default dict) }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
A number as a flag or a field takes it: Helm reads the numbers of values files as floats, which print as 3.3554432e+07.
*/}}
{{- define "gpuscale-adapter.scalar" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) }}{{ int64 . }}{{ else }}{{ . }}{{ end -}}
{{- end -}}

{{/* A value that is set: not null (0, false and "" are set). */}}
{{- define "gpuscale-adapter.set" -}}
{{- if not (kindIs "invalid" .) }}true{{ end -}}
{{- end -}}

{{/*
prometheus-adapter's own image (registry.k8s.io/prometheus-adapter/prometheus-adapter, or a mirror of it) in a values
file written for its chart: that image cannot run this chart's adapter, so gpuscale's is used and NOTES says so.
*/}}
{{- define "gpuscale-adapter.foreignImage" -}}
{{- $last := .Values.image.repository | splitList "/" | last -}}
{{- if has $last (list "prometheus-adapter" "k8s-prometheus-adapter" "k8s-prometheus-adapter-amd64") }}true{{ end -}}
{{- end -}}

{{- define "gpuscale-adapter.image" -}}
{{- if include "gpuscale-adapter.foreignImage" . -}}
{{- printf "ghcr.io/gpuscale/gpuscale:%s" .Chart.AppVersion -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) -}}
{{- end -}}
{{- end -}}

{{/* Where the serving certificate comes from: "tls" (tls.*), "certManager", or "" (self-signed at start). */}}
{{- define "gpuscale-adapter.certSource" -}}
{{- if .Values.tls.enable -}}tls{{- else if .Values.certManager.enabled -}}certManager{{- end -}}
{{- end -}}

{{/* prometheus.url (a template), then :port when set, then path: as prometheus-adapter's chart builds it. */}}
{{- define "gpuscale-adapter.prometheusUrl" -}}
{{- $port := ternary (print ":" (include "gpuscale-adapter.scalar" .Values.prometheus.port)) "" (not (empty .Values.prometheus.port)) -}}
{{- print (tpl .Values.prometheus.url .) $port (.Values.prometheus.path | default "") -}}
{{- end -}}

{{- define "gpuscale-adapter.servingCertSecret" -}}
{{- printf "%s-serving-cert" (include "gpuscale-adapter.fullname" .) -}}
{{- end -}}

{{- define "gpuscale-adapter.kedaClientCASecret" -}}
{{- .Values.keda.clientCASecret | default (printf "%s-keda-client-ca" (include "gpuscale-adapter.fullname" .)) -}}
{{- end -}}

{{/*
Which APIServices are registered: apiServices.<group> when set, else as prometheus-adapter's chart decides from the
rules (custom.metrics.k8s.io for any custom rule, external.metrics.k8s.io for external rules, metrics.k8s.io for
resource rules), where the built-in rules have both custom and external rules. With keda.enabled KEDA's metrics server
holds external.metrics.k8s.io (a cluster has one).
*/}}
{{- define "gpuscale-adapter.apiCustom" -}}
{{- if include "gpuscale-adapter.set" .Values.apiServices.custom -}}
{{- if .Values.apiServices.custom }}true{{ end -}}
{{- else if or .Values.rules.builtin .Values.rules.default .Values.rules.custom -}}true
{{- end -}}
{{- end -}}

{{- define "gpuscale-adapter.apiExternal" -}}
{{- if include "gpuscale-adapter.set" .Values.apiServices.external -}}
{{- if .Values.apiServices.external }}true{{ end -}}
{{- else if and (not .Values.keda.enabled) (not (include "gpuscale-adapter.externalHeldBy" .)) (or .Values.rules.external (and .Values.rules.builtin (not .Values.rules.existing))) -}}true
{{- end -}}
{{- end -}}

{{/*
The Service (namespace/name) of another server that holds v1beta1.external.metrics.k8s.io in the cluster, KEDA's
metrics server most often: a cluster has one, and registering ours would take every External metric and ScaledObject
from it. Found with lookup, so only where Helm reads the cluster (install, upgrade, --dry-run=server); helm template
sees none.
*/}}
{{- define "gpuscale-adapter.externalHeldBy" -}}
{{- $found := lookup "apiregistration.k8s.io/v1" "APIService" "" "v1beta1.external.metrics.k8s.io" -}}
{{- $service := dig "spec" "service" (dict) $found -}}
{{- if and $found (not (and (eq (get $service "name") (include "gpuscale-adapter.fullname" .)) (eq (get $service "namespace") (include "gpuscale-adapter.namespace" .)))) -}}
{{- printf "%s/%s" (get $service "namespace" | default "?") (get $service "name" | default "?") -}}
{{- end -}}
{{- end -}}

{{- define "gpuscale-adapter.apiResource" -}}
{{- if include "gpuscale-adapter.set" .Values.apiServices.resource -}}
{{- if .Values.apiServices.resource }}true{{ end -}}
{{- else if .Values.rules.resource -}}true
{{- end -}}
{{- end -}}
