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

{{- /* "<fullname>-<suffix>", within 63 characters for any release name (a Service's name is a
DNS label; every other name keeps to the same limit): a full name too long for its suffix is cut
and a hash of it added, so two long release names that share a beginning still differ. */ -}}
{{- define "cronlease.suffixed" -}}
{{- $fullname := include "cronlease.fullname" .context -}}
{{- $name := printf "%s-%s" $fullname .suffix -}}
{{- if le (len $name) 63 -}}
{{- $name -}}
{{- else -}}
{{- $kept := $fullname | trunc (int (sub 63 (add (len .suffix) 7))) | trimSuffix "-" -}}
{{- printf "%s-%s-%s" $kept (sha256sum $fullname | trunc 5) .suffix -}}
{{- end -}}
{{- end -}}

{{- /* The metrics Service; its name is also the job label of the series Prometheus scrapes. */ -}}
{{- define "cronlease.metricsServiceName" -}}
{{- include "cronlease.suffixed" (dict "context" . "suffix" "metrics") -}}
{{- end -}}

{{- /* The leader election's Lease: the release's own unless set ("cronlease-leader" for a
release named cronlease, the name charts before 0.3.0 gave every release). */ -}}
{{- define "cronlease.leaseName" -}}
{{- .Values.leaderElection.leaseName | default (include "cronlease.suffixed" (dict "context" . "suffix" "leader")) -}}
{{- end -}}

{{- /* repository@digest when a digest is set (the tag is then ignored), else repository:tag. */ -}}
{{- define "cronlease.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
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
