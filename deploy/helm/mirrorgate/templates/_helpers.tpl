{{- define "mirrorgate.fullname" -}}
{{- printf "%s-mirrorgate" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mirrorgate.labels" -}}
app.kubernetes.io/name: mirrorgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "mirrorgate.selector" -}}
app.kubernetes.io/name: mirrorgate
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The listener ports of one listener config, as container ports. */}}
{{- define "mirrorgate.listenerPorts" -}}
{{- $l := .listener -}}
{{- range $i, $_ := until (int $l.max_brokers) }}
- name: {{ printf "%s-%d" $.prefix $i }}
  containerPort: {{ add $l.port_base $i }}
{{- end }}
{{- end -}}

{{/* The per-pod config: the pod's name as instance id, its address advertised. */}}
{{- define "mirrorgate.render" -}}
sed -e "s/__INSTANCE_ID__/${POD_NAME}/" -e "s/__ADVERTISED_HOST__/${ADVERTISED_HOST}/" /etc/mirrorgate/template/mirrorgate.yaml > /tmp/mirrorgate.yaml
{{- end -}}

{{- define "mirrorgate.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef: { fieldPath: metadata.name }
- name: POD_NAMESPACE
  valueFrom:
    fieldRef: { fieldPath: metadata.namespace }
- name: ADVERTISED_HOST
  value: {{ default (printf "$(POD_NAME).%s-pods.$(POD_NAMESPACE).svc" (include "mirrorgate.fullname" .)) .Values.advertisedHost | quote }}
- name: MIRRORGATE_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.adminToken.secretName }}
      key: {{ .Values.adminToken.key }}
{{- end -}}

{{- define "mirrorgate.mounts" -}}
- name: config
  mountPath: /etc/mirrorgate/template
  readOnly: true
- name: state
  mountPath: /var/lib/mirrorgate
{{- end -}}
