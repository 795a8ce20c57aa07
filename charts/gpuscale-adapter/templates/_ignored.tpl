{{/*
The values this release was given that it cannot act on, one line each: "ignored: <key> because <why>". NOTES.txt
prints them at install, so that a values file written for prometheus-adapter's chart never loses a setting unseen.
Values are also checked here where a wrong one would only show once the pods run.
*/}}
{{- define "gpuscale-adapter.ignored" -}}
{{- $v := .Values -}}
{{- if or $v.psp.create $v.psp.annotations }}
ignored: psp because PodSecurityPolicy was removed in Kubernetes 1.25 (prometheus-adapter's chart 5.0 dropped it too); Pod Security admission (the namespace's pod-security.kubernetes.io labels) takes its place
{{- end }}
{{- if include "gpuscale-adapter.foreignImage" . }}
ignored: image.repository {{ $v.image.repository }}{{ with $v.image.tag }} and image.tag {{ . }}{{ end }} because that is prometheus-adapter's image, which cannot run this chart; {{ include "gpuscale-adapter.image" . }} runs instead (set image.repository to gpuscale's image or your mirror of it)
{{- end }}
{{- if $v.rules.existing }}
{{- range $key := list "builtin" "default" "custom" "external" "resource" }}
{{- if index $v.rules $key }}
ignored: rules.{{ $key }} because rules.existing names the ConfigMap the adapter reads its rules from (key {{ $v.rules.existingKey }}), as in prometheus-adapter's chart
{{- end }}
{{- end }}
{{- end }}
{{- if and $v.tls.enable $v.certManager.enabled }}
ignored: certManager.enabled because tls.enable gives the serving certificate
{{- end }}
{{- if and $v.podDisruptionBudget.enabled (include "gpuscale-adapter.set" $v.podDisruptionBudget.minAvailable) (include "gpuscale-adapter.set" $v.podDisruptionBudget.maxUnavailable) }}
ignored: podDisruptionBudget.maxUnavailable because podDisruptionBudget.minAvailable is set, and a PodDisruptionBudget takes one of the two
{{- end }}
{{- if and (include "gpuscale-adapter.set" $v.runAsUser) (hasKey ($v.securityContext | default dict) "runAsUser") }}
ignored: runAsUser because securityContext.runAsUser is set
{{- end }}
{{- if and $v.strategy (eq ($v.strategy.type | default "") "Recreate") $v.strategy.rollingUpdate }}
ignored: strategy.rollingUpdate because strategy.type is Recreate
{{- end }}
{{- $flags := (.Files.Get "files/ignored-flags.yaml" | fromYaml).flags }}
{{- range $v.extraArguments }}
{{- $name := . | toString | trimPrefix "-" | trimPrefix "-" | splitList "=" | first | replace "_" "-" }}
{{- if and (hasPrefix "-" (toString .)) (hasKey $flags $name) }}
ignored: extraArguments {{ . }} because {{ index $flags $name }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Values that cannot work: refused at install, naming the value, rather than left for the pods to fail on. */}}
{{- define "gpuscale-adapter.check" -}}
{{- if .Values.tls.enable }}
{{- range $key := list "ca" "certificate" "key" }}
{{- if not (contains "-----BEGIN " (index $.Values.tls $key | default "")) }}
{{- fail (printf "tls.%s: tls.enable needs the serving certificate, its key and the CA that signed it in PEM (-----BEGIN ...)" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- if not .Values.prometheus.url }}
{{- fail "prometheus.url: the adapter needs the URL of the Prometheus that scrapes the collectors" }}
{{- end }}
{{- end -}}
