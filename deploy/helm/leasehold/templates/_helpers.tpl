{{- define "leasehold.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "leasehold.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "leasehold.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leasehold.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "leasehold.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "leasehold.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "leasehold.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "leasehold.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the Redis URL (or Redlock primaries) and password. */}}
{{- define "leasehold.redisSecretName" -}}
{{- default (printf "%s-redis" (include "leasehold.fullname" .)) .Values.redis.existingSecret }}
{{- end }}

{{/* The key of the password in that Secret, or "" when there is no password. */}}
{{- define "leasehold.redisPasswordKey" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.secretKeys.password }}
{{- else if .Values.redis.password }}
{{- "password" }}
{{- end }}
{{- end }}

{{- define "leasehold.redisUrlKey" -}}
{{- if .Values.redis.existingSecret }}{{ .Values.redis.secretKeys.url }}{{ else }}url{{ end }}
{{- end }}

{{- define "leasehold.authSecretName" -}}
{{- default (printf "%s-auth" (include "leasehold.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{/*
Checks the values that must agree with one another, failing the render with a sentence.
*/}}
{{- define "leasehold.validate" -}}
{{- $mode := .Values.redis.mode }}
{{- if not (has $mode (list "single" "sentinel" "cluster" "redlock")) }}
{{- fail (printf "redis.mode %q: use single, sentinel, cluster or redlock" $mode) }}
{{- end }}
{{- if not .Values.redis.existingSecret }}
{{- if eq $mode "redlock" }}
{{- $n := len .Values.redis.redlock }}
{{- if or (lt $n 3) (eq (mod $n 2) 0) }}
{{- fail (printf "redis.mode redlock needs redis.redlock: an odd number of primaries, at least 3 (got %d)" $n) }}
{{- end }}
{{- range .Values.redis.redlock }}
{{- if not (or (hasPrefix "redis://" .) (hasPrefix "rediss://" .)) }}
{{- fail (printf "redis.redlock: Redlock's primaries are redis:// or rediss:// URLs, not %q" .) }}
{{- end }}
{{- end }}
{{- else }}
{{- $url := .Values.redis.url }}
{{- $schemes := dict "single" (list "redis://" "rediss://") "sentinel" (list "redis-sentinel://" "rediss-sentinel://") "cluster" (list "redis-cluster://" "rediss-cluster://") }}
{{- $ok := false }}
{{- range (get $schemes $mode) }}{{ if hasPrefix . $url }}{{ $ok = true }}{{ end }}{{ end }}
{{- if not $ok }}
{{- fail (printf "redis.url %q does not fit redis.mode %s: it starts with %s" $url $mode (join " or " (get $schemes $mode))) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- if and .Values.tls.clientCA.secretName (not .Values.tls.enabled) }}
{{- fail "tls.clientCA (mutual TLS) needs tls.enabled" }}
{{- end }}
{{- if and .Values.tls.enabled .Values.tls.clientCA.secretName (not .Values.tls.probe.clientSecretName) }}
{{- fail "mutual TLS (tls.clientCA) needs tls.probe.clientSecretName: a client certificate for the health probes" }}
{{- end }}
{{- if and .Values.auth.enabled (not .Values.auth.existingSecret) (not .Values.auth.file) }}
{{- fail "auth.enabled needs auth.existingSecret or auth.file" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled" }}
{{- end }}
{{- if lt (int .Values.drainSeconds) 1 }}
{{- fail "drainSeconds must be at least 1" }}
{{- end }}
{{- if lt (int .Values.terminationGraceExtraSeconds) 1 }}
{{- fail "terminationGraceExtraSeconds must be at least 1: the pod's grace must exceed the drain" }}
{{- end }}
{{- $allowed := list "console" "echo" "keepalive-interval" "keepalive-timeout" "key-prefix" "log-format" "max-leases" "max-leases-per-connection" "max-message-bytes" "max-waiters" "max-waiters-per-lock" "metrics-name-prefix" "otlp-endpoint" "redis-allow-eviction" "redis-durable" "redis-max-in-flight" "redis-replicas" "redis-restart-hold" "redis-timeout" "waiter-ttl" "wakeups" }}
{{- range $key, $_ := .Values.settings }}
{{- if not (has $key $allowed) }}
{{- fail (printf "settings.%s: not an option the chart passes through (allowed: %s; the chart sets the others from their own values)" $key (join ", " $allowed)) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The probe action: gRPC health without TLS, `leasehold health` with it. */}}
{{- define "leasehold.healthProbe" -}}
{{- if .Values.tls.enabled }}
exec:
  command:
    - leasehold
    - health
    - --server
    - https://{{ .Values.tls.probe.host }}:{{ .Values.grpcPort }}
    - --tls-ca
    - {{ .Values.mountRoot }}/tls/{{ .Values.tls.probe.caKey }}
    {{- if .Values.tls.clientCA.secretName }}
    - --tls-cert
    - {{ .Values.mountRoot }}/probe-client/tls.crt
    - --tls-key
    - {{ .Values.mountRoot }}/probe-client/tls.key
    {{- end }}
{{- else }}
grpc:
  port: {{ .Values.grpcPort }}
{{- end }}
{{- end }}
