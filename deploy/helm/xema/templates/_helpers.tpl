{{/* The chart's name, or nameOverride. */}}
{{- define "xema.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's object name: fullnameOverride, else RELEASE-xema (RELEASE alone when it holds the chart name). */}}
{{- define "xema.fullname" -}}
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

{{/* Labels of every object but the migration's (which names its own component). */}}
{{- define "xema.labels" -}}
{{ include "xema.releaseLabels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "xema.releaseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "xema.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "xema.tag" . | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of the gateway's pods (not the migration Job's: the Service, PDB and NetworkPolicy select these). */}}
{{- define "xema.selectorLabels" -}}
app.kubernetes.io/name: {{ include "xema.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "xema.tag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "xema.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "xema.tag" .) }}
{{- end }}

{{- define "xema.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "xema.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the DSN: the chart's own when store.dsn is set. */}}
{{- define "xema.storeSecret" -}}
{{- if .Values.store.dsn }}
{{- printf "%s-store" (include "xema.fullname" .) }}
{{- else }}
{{- required "store.existingSecret (a Secret holding the PostgreSQL DSN) or store.dsn is required" .Values.store.existingSecret }}
{{- end }}
{{- end }}

{{/* XEMA_STORE from the DSN Secret; used by the gateway and the migration. */}}
{{- define "xema.storeEnv" -}}
- name: XEMA_STORE
  valueFrom:
    secretKeyRef:
      name: {{ include "xema.storeSecret" . }}
      key: {{ .Values.store.secretKey }}
{{- end }}

{{/* The migration container: `xema migrate` against the DSN, nothing else. */}}
{{- define "xema.migrateContainer" -}}
- name: migrate
  image: {{ include "xema.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["migrate"]
  env:
    {{- include "xema.storeEnv" . | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
{{- end }}

{{/* The config file of `xema serve --config`: the user's keys plus the ones the chart owns. */}}
{{- define "xema.config" -}}
{{- $owned := list "addr" "data-dir" "store" "metrics-addr" "policy-dir" }}
{{- range $owned }}
{{- if hasKey $.Values.config . }}
{{- fail (printf "config.%s is set by the chart; remove it from config" .) }}
{{- end }}
{{- end }}
{{- $_ := required "config.issuer (your OIDC issuer) is required: its URL, the exact iss of its tokens, e.g. --set config.issuer=https://keycloak.example.com/realms/acme (without one every replica would run a development issuer of its own, whose tokens the others refuse)" .Values.config.issuer }}
{{- $_ = required "config.audience (the audience your issuer's tokens carry for the gateway) is required with config.issuer" .Values.config.audience }}
{{- $cfg := deepCopy .Values.config }}
{{- $_ = set $cfg "addr" (printf "0.0.0.0:%d" (int .Values.service.port)) }}
{{- $_ = set $cfg "data-dir" "/data" }}
{{- $_ = set $cfg "store" "${XEMA_STORE}" }}
{{- $_ = set $cfg "metrics-addr" (printf "0.0.0.0:%d" (int .Values.service.metricsPort)) }}
{{- if .Values.customPolicies }}
{{- $_ = set $cfg "policy-dir" "/etc/xema/policies" }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}
