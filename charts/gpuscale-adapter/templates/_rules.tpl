{{/*
The rules file, in prometheus-adapter's layout (rules, externalRules, resourceRules), in the order the adapter tries
them: the built-in rules (files/default-rules.yaml, a copy of adapter/default-rules.yaml), prometheus-adapter's
default rules (rules.default), rules.custom; then the built-in external rules and rules.external; then rules.resource.

With only the built-in rules (and rules.gpuExporterJobs at its default) it is files/default-rules.yaml byte for
byte, as the kustomize base's ConfigMap is. The other lists are spliced in as text rather than the file parsed and
written again, which would drop its comments: custom rules go after the last built-in rule, before the comment block
that opens externalRules, and external rules at the end of the file; rules.gpuExporterJobs replaces the GPU rules'
job matcher in the text.
*/}}
{{- define "gpuscale-adapter.ruleItems" -}}
{{- if . }}{{ toYaml . | indent 2 }}{{ "\n" }}{{ end -}}
{{- end -}}

{{- define "gpuscale-adapter.rulesText" -}}
{{- $rules := .Values.rules -}}
{{- $custom := "" -}}
{{- if $rules.default -}}
{{- $custom = include "gpuscale-adapter.ruleItems" (.Files.Get "files/prometheus-adapter-rules.yaml" | fromYaml).rules -}}
{{- end -}}
{{- $custom = print $custom (include "gpuscale-adapter.ruleItems" $rules.custom) -}}
{{- $external := include "gpuscale-adapter.ruleItems" $rules.external -}}
{{- $text := "" -}}
{{- if $rules.builtin -}}
{{- $builtin := .Files.Get "files/default-rules.yaml" -}}
{{- /* the GPU exporter's jobs, as a PromQL string (toJson escapes as PromQL reads it) */}}
{{- $jobs := "gpuscale-collector|(nvidia-)?dcgm-exporter" -}}
{{- if not (contains (printf "job=~%s" ($jobs | toJson)) $builtin) -}}
{{- fail "files/default-rules.yaml must read the GPU exporter's jobs as rules.gpuExporterJobs' default" -}}
{{- end -}}
{{- /* in the file's single-quoted YAML strings a quote is written twice */}}
{{- $builtin = replace (printf "job=~%s" ($jobs | toJson)) (printf "job=~%s" ($rules.gpuExporterJobs | toJson | replace "'" "''")) $builtin -}}
{{- $opening := regexFind "\n\n(#[^\n]*\n)*externalRules:\n" $builtin -}}
{{- $parts := splitList $opening $builtin -}}
{{- if or (not $opening) (ne (len $parts) 2) -}}
{{- fail "files/default-rules.yaml must have one top-level externalRules: after the rules" -}}
{{- end -}}
{{- $head := index $parts 0 -}}
{{- $tail := index $parts 1 -}}
{{- if $custom }}{{ $head = print $head "\n" (trimSuffix "\n" $custom) }}{{ end -}}
{{- if $external }}{{ $tail = print (trimSuffix "\n" $tail) "\n" $external }}{{ end -}}
{{- $text = print $head $opening $tail -}}
{{- else -}}
{{- $text = ternary (print "rules:\n" $custom) "rules: []\n" (ne $custom "") -}}
{{- if $external }}{{ $text = print $text "externalRules:\n" $external }}{{ end -}}
{{- end -}}
{{- if $rules.resource -}}
{{- $text = print (trimSuffix "\n" $text) "\nresourceRules:\n" (toYaml $rules.resource | indent 2) "\n" -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/* The ConfigMap's name carries a hash of the rules, as kustomize's configMapGenerator does: a change rolls the pods. */}}
{{- define "gpuscale-adapter.rulesConfigMap" -}}
{{- if .Values.rules.existing -}}
{{- .Values.rules.existing -}}
{{- else -}}
{{- printf "%s-rules-%s" (include "gpuscale-adapter.fullname" .) (include "gpuscale-adapter.rulesText" . | sha256sum | trunc 10) -}}
{{- end -}}
{{- end -}}

{{- define "gpuscale-adapter.rulesKey" -}}
{{- if .Values.rules.existing }}{{ .Values.rules.existingKey }}{{ else }}rules.yaml{{ end -}}
{{- end -}}
