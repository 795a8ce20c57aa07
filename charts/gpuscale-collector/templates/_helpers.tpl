{{/* The chart's name: the app.kubernetes.io/name label and the selector. */}}
{{- define "gpuscale-collector.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The objects' name. A release named after the chart, or after the project ("gpuscale", as one would name the release
of both gpuscale charts), keeps the name manifests/base gives: gpuscale-collector. Any other release name prefixes it.
*/}}
{{- define "gpuscale-collector.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else if hasPrefix (printf "%s-" .Release.Name) $name -}}
{{- $name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpuscale-collector.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "gpuscale-collector.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpuscale-collector.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Helm's own labels: who installed the object. Everything else is labelled as manifests/ labels it. */}}
{{- define "gpuscale-collector.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{- define "gpuscale-collector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuscale-collector.name" . | quote }}
{{- end -}}

{{- define "gpuscale-collector.labels" -}}
{{ include "gpuscale-collector.selectorLabels" . }}
app.kubernetes.io/component: collector
app.kubernetes.io/part-of: gpuscale
{{ include "gpuscale-collector.helmLabels" . }}
{{- end -}}

{{/* The labels kube-prometheus-stack's Prometheus selects by, then the user's own (which win). */}}
{{- define "gpuscale-collector.prometheusLabels" -}}
{{- $labels := dict -}}
{{- with .root.Values.kubePrometheusStack.release }}{{ $_ := set $labels "release" . }}{{ end -}}
{{- $labels = mergeOverwrite $labels (.extra | default dict) -}}
{{- with $labels }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* Where the chart mounts what it makes. */}}
{{- define "gpuscale-collector.webConfigFile" -}}/etc/gpuscale-collector/web/web-config.yaml{{- end -}}
{{- define "gpuscale-collector.tlsDir" -}}/etc/gpuscale-collector/tls{{- end -}}
{{/* dcgm-exporter's chart names its counters ConfigMap so; its users' volumes and -m arguments name it. */}}
{{- define "gpuscale-collector.countersConfigMap" -}}exporter-metrics-config-map{{- end -}}
{{/* image.repository's default, for values that name dcgm-exporter's image instead (a test keeps the two equal). */}}
{{- define "gpuscale-collector.defaultRepository" -}}ghcr.io/gpuscale/gpuscale{{- end -}}

{{/*
Everything the templates derive from the values, computed once here and read as JSON: the container's arguments,
the port it listens on, the counters file the chart mounts, the image, how the probes reach the collector, and the
notes that name what is not honoured as given.
*/}}
{{- define "gpuscale-collector.state" -}}
{{- $v := .Values -}}
{{- $notes := list -}}
{{- $userArgs := list -}}
{{- range $v.arguments }}{{ $userArgs = append $userArgs (toString .) }}{{ end -}}

{{- /* The settings the chart has to know, as the collector reads them: the last flag given, else our environment
       variable, else dcgm-exporter's. */ -}}
{{- $flagSetting := dict "-f" "collectors" "--collectors" "collectors" "-a" "address" "--address" "address" "-m" "configmap" "--configmap-data" "configmap" -}}
{{- $given := dict -}}
{{- $env := dict -}}
{{- range $v.extraEnv }}{{ if and (kindIs "map" .) (hasKey . "value") }}{{ $_ := set $env .name (toString .value) }}{{ end }}{{ end -}}
{{- range $setting, $names := dict "collectors" (list "DCGM_EXPORTER_COLLECTORS" "GPUSCALE_COLLECTOR_COLLECTORS") "configmap" (list "DCGM_EXPORTER_CONFIGMAP_DATA" "GPUSCALE_COLLECTOR_CONFIGMAP_DATA") -}}
{{- range $names }}{{ if hasKey $env . }}{{ $_ := set $given $setting (get $env .) }}{{ end }}{{ end -}}
{{- end -}}
{{- /* The collector accepts these of dcgm-exporter's flags without effect (collector/settings.py, FLAGS; a test
       keeps the lists equal) and says why in its log at start. */ -}}
{{- $ignoredFlags := list "--kubernetes-gpu-id-type" "--kubernetes-virtual-gpus" "-d" "--devices" "-s" "--switch-devices" "-p" "--cpu-devices" "--enable-dcgm-log" "--dcgm-log-level" "--fake-gpus" "--web-systemd-socket" "--disable-startup-validate" "--enable-pprof" -}}
{{- range $i, $arg := $userArgs -}}
{{- $flag := $arg -}}
{{- $value := "" -}}
{{- $hasValue := false -}}
{{- if and (hasPrefix "-" $arg) (contains "=" $arg) -}}
{{- $parts := regexSplit "=" $arg 2 -}}
{{- $flag = index $parts 0 -}}
{{- $value = index $parts 1 -}}
{{- $hasValue = true -}}
{{- else if lt (add1 $i) (len $userArgs) -}}
{{- $value = index $userArgs (add1 $i) -}}
{{- $hasValue = true -}}
{{- end -}}
{{- if and $hasValue (hasKey $flagSetting $flag) -}}
{{- $_ := set $given (get $flagSetting $flag) $value -}}
{{- end -}}
{{- if has $flag $ignoredFlags -}}
{{- $notes = append $notes (printf "ignored: arguments %s, because the collector accepts this dcgm-exporter flag without effect (its log at start says why; docs/collector.md has the table)" $flag) -}}
{{- end -}}
{{- end -}}

{{- /* The listen address: -a in arguments, else service.address, else service.port. */ -}}
{{- $address := default (printf ":%d" (int $v.service.port)) $v.service.address -}}
{{- $chartAddress := $address -}}
{{- with $given.address }}{{ $address = . }}{{ end -}}
{{- $port := $address | splitList ":" | last | int -}}
{{- range $name := list "DCGM_EXPORTER_LISTEN" "GPUSCALE_COLLECTOR_ADDRESS" -}}
{{- if hasKey $env $name -}}
{{- $notes = append $notes (printf "ignored: extraEnv %s, because the chart passes --address (from service.port or service.address), which takes precedence; set those instead" $name) -}}
{{- end -}}
{{- end -}}
{{- range $name := list "DCGM_EXPORTER_KUBERNETES" "GPUSCALE_COLLECTOR_KUBERNETES" -}}
{{- if and (hasKey $env $name) (not (has (lower (get $env $name)) (list "1" "t" "true" "y" "yes" "on"))) -}}
{{- $notes = append $notes (printf "ignored: extraEnv %s, because the chart always passes --kubernetes (pod labels from the kubelet)" $name) -}}
{{- end -}}
{{- end -}}

{{- /* The counters file. customMetrics is mounted where -f points (dcgm-exporter's default path without -f). A -f
       naming a file of dcgm-exporter's image, which this image does not have, gets the built-in counters there. A
       path under a volume of extraVolumeMounts is the user's own file. */ -}}
{{- $cm := include "gpuscale-collector.countersConfigMap" . -}}
{{- $file := $given.collectors | default "" -}}
{{- $covered := false -}}
{{- range $v.extraVolumeMounts -}}
{{- $root := trimSuffix "/" (toString .mountPath) -}}
{{- if and $file (or (eq $file $root) (hasPrefix (printf "%s/" $root) $file)) }}{{ $covered = true }}{{ end -}}
{{- end -}}
{{- $countersPath := "" -}}
{{- $countersFlag := false -}}
{{- if $v.customMetrics -}}
{{- if not $file -}}
{{- $countersPath = "/etc/dcgm-exporter/default-counters.csv" -}}
{{- $countersFlag = true -}}
{{- else if not $covered -}}
{{- $countersPath = $file -}}
{{- end -}}
{{- else if and $file (not $covered) (hasPrefix "/etc/dcgm-exporter/" $file) -}}
{{- $countersPath = $file -}}
{{- $notes = append $notes (printf "replaced: arguments -f %s, a file of dcgm-exporter's image that this image does not have: the collector's built-in counters (dcgm-exporter's defaults plus the profiling fields) are mounted there; set customMetrics to choose the fields" $file) -}}
{{- end -}}
{{- $configMapRead := dict -}}
{{- with $given.configmap -}}
{{- if ne . "none" -}}
{{- $parts := regexSplit ":" . 2 -}}
{{- if eq (len $parts) 2 }}{{ $configMapRead = dict "namespace" (index $parts 0) "name" (index $parts 1) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $countersConfigMap := or (not (empty $v.customMetrics)) (ne $countersPath "") -}}
{{- range $v.extraConfigMapVolumes -}}
{{- if eq (dig "configMap" "name" "" .) $cm }}{{ $countersConfigMap = true }}{{ end -}}
{{- end -}}
{{- if and (eq (get $configMapRead "name" | default "") $cm) (eq (get $configMapRead "namespace" | default "") (include "gpuscale-collector.namespace" .)) -}}
{{- $countersConfigMap = true -}}
{{- end -}}

{{- /* The image: dcgm-exporter's own image, or a tag of its form (<DCGM version>-<exporter version>-<base>), cannot
       run this collector. */ -}}
{{- $repository := $v.image.repository -}}
{{- $tag := toString ($v.image.tag | default "") -}}
{{- if contains "dcgm-exporter" $repository -}}
{{- $notes = append $notes (printf "ignored: image.repository %s and image.tag, because that is dcgm-exporter's image, which has no gpuscale-collector; the chart runs %s:%s" $repository (include "gpuscale-collector.defaultRepository" .) .Chart.AppVersion) -}}
{{- $repository = include "gpuscale-collector.defaultRepository" . -}}
{{- $tag = "" -}}
{{- else if regexMatch "^[0-9]+\\.[0-9]+\\.[0-9]+-[0-9]+\\.[0-9]+\\.[0-9]+" $tag -}}
{{- $notes = append $notes (printf "ignored: image.tag %s, because it is a dcgm-exporter release (<DCGM version>-<dcgm-exporter version>); the chart runs %s:%s" $tag $repository .Chart.AppVersion) -}}
{{- $tag = "" -}}
{{- end -}}

{{- if has "SYS_ADMIN" (dig "capabilities" "add" (list) ($v.securityContext | default dict)) -}}
{{- $notes = append $notes "note: securityContext.capabilities.add SYS_ADMIN is kept as given but not needed: the profiling series come from NVML GPM, not from DCGM" -}}
{{- end -}}
{{- if hasKey $v "mapPodsMetrics" -}}
{{- $notes = append $notes "ignored: mapPodsMetrics, because dcgm-exporter's chart never used it (removed in 2023); pod labels come with -k, which the chart always passes" -}}
{{- end -}}
{{- if and $v.serviceMonitor.enabled (not $v.service.enable) -}}
{{- $notes = append $notes "ignored: serviceMonitor.enabled, because service.enable is false and a ServiceMonitor finds its targets through the Service" -}}
{{- end -}}

{{- /* Web configuration (TLS, basic auth) and how the kubelet's probes get through it: a client certificate or a
       password they cannot give leaves a TCP check. */ -}}
{{- $tls := $v.tlsServerConfig.enabled -}}
{{- $users := $v.basicAuth.users | default dict -}}
{{- $webConfig := or $tls (gt (len $users) 0) -}}
{{- $clientCerts := and $tls (has $v.tlsServerConfig.clientAuthType (list "RequireAnyClientCert" "RequireAndVerifyClientCert" "RequireClientCert")) -}}
{{- $probe := "http" -}}
{{- if or (gt (len $users) 0) $clientCerts }}{{ $probe = "tcp" }}{{ else if $tls }}{{ $probe = "https" }}{{ end -}}
{{- if and $clientCerts $v.serviceMonitor.enabled (not $v.serviceMonitor.tlsConfig) -}}
{{- $notes = append $notes (printf "note: tlsServerConfig.clientAuthType %s asks Prometheus for a client certificate: give it one in serviceMonitor.tlsConfig" $v.tlsServerConfig.clientAuthType) -}}
{{- end -}}

{{- /* The chart's flags first, then arguments: the collector takes the last of a flag given twice. */ -}}
{{- $args := list "--kubernetes" (printf "--address=%s" $chartAddress) -}}
{{- if $countersFlag }}{{ $args = append $args (printf "--collectors=%s" $countersPath) }}{{ end -}}
{{- if $v.kubernetes.enablePodLabels }}{{ $args = append $args "--kubernetes-enable-pod-labels" }}{{ end -}}
{{- if $v.kubernetes.enablePodUID }}{{ $args = append $args "--kubernetes-enable-pod-uid" }}{{ end -}}
{{- with $v.kubernetes.podLabelAllowlistRegex }}{{ $args = append $args (printf "--kubernetes-pod-label-allowlist-regex=%s" (join "," .)) }}{{ end -}}
{{- if $v.kubernetesDRA.enabled }}{{ $args = append $args "--kubernetes-enable-dra" }}{{ end -}}
{{- if $v.debugDump.enabled -}}
{{- $args = concat $args (list "--dump-enabled" (printf "--dump-directory=%s" $v.debugDump.directory) (printf "--dump-retention=%d" (int $v.debugDump.retention)) (printf "--dump-compression=%t" $v.debugDump.compression)) -}}
{{- end -}}
{{- if $webConfig }}{{ $args = append $args (printf "--web-config-file=%s" (include "gpuscale-collector.webConfigFile" .)) }}{{ end -}}
{{- $args = concat $args $userArgs -}}

{{- dict "args" $args "port" $port "countersPath" $countersPath "countersConfigMap" $countersConfigMap "configMapRead" $configMapRead "image" (printf "%s:%s" $repository ($tag | default .Chart.AppVersion)) "probe" $probe "webConfig" $webConfig "notes" $notes | toJson -}}
{{- end -}}

{{- define "gpuscale-collector.tlsSecretName" -}}
{{- if .Values.tlsServerConfig.existingSecret -}}
{{- tpl .Values.tlsServerConfig.existingSecret . -}}
{{- else -}}
{{- include "gpuscale-collector.fullname" . }}-tls
{{- end -}}
{{- end -}}
