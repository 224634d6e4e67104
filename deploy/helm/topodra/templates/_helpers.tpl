{{- define "topodra.name" -}}{{ .Release.Name }}{{- end -}}

{{- define "topodra.serviceAccountName" -}}{{ .Values.serviceAccount.name | default .Release.Name }}{{- end -}}

{{- define "topodra.selectorLabels" -}}
app.kubernetes.io/name: topodra
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "topodra.labels" -}}
{{ include "topodra.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The metrics port, from config.metricsAddress (":9402", "0.0.0.0:9402"); "" when it is off. */}}
{{- define "topodra.metricsPort" -}}
{{- with .Values.config.metricsAddress -}}{{ regexFind "[0-9]+$" . }}{{- end -}}
{{- end -}}
