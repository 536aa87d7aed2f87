{{- define "cronlease.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cronlease.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "cronlease.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* The schema requires serviceAccount.name when the chart does not create the account. */ -}}
{{- define "cronlease.serviceAccountName" -}}
{{- default (include "cronlease.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "cronlease.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cronlease.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cronlease.labels" -}}
{{ include "cronlease.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- /* The identity the API server sees for the operator: only it may write what cronlease trusts. */ -}}
{{- define "cronlease.serviceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "cronlease.serviceAccountName" . }}
{{- end -}}

{{- /* What the fencing bindings match when watchNamespaces is set (unset: every namespace). */ -}}
{{- define "cronlease.fencedNamespaces" -}}
matchResources:
  # Only the namespaces this release watches: another release fences its own.
  namespaceSelector:
    matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: In
      values:
      {{- range .Values.watchNamespaces }}
      - {{ . | quote }}
      {{- end }}
{{- end -}}
