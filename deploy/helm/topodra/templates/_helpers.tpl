{{- define "topodra.name" -}}{{ .Release.Name }}{{- end -}}
{{- define "topodra.labels" -}}
app.kubernetes.io/name: topodra
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
