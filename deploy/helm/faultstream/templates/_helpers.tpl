{{/* Release-scoped name of the chart's objects: <release>-faultstream (or fullnameOverride). */}}
{{- define "faultstream.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains "faultstream" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-faultstream" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries; "component" is added by each template. */}}
{{- define "faultstream.labels" -}}
app.kubernetes.io/name: faultstream
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "worker"). */}}
{{- define "faultstream.selector" -}}
app.kubernetes.io/name: faultstream
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "faultstream.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The service accounts: base (no API rights), Kubernetes connector, executor. */}}
{{- define "faultstream.sa.base" -}}{{ include "faultstream.fullname" . }}{{- end -}}
{{- define "faultstream.sa.connector" -}}{{ include "faultstream.fullname" . }}-k8s-connector{{- end -}}
{{- define "faultstream.sa.executor" -}}{{ include "faultstream.fullname" . }}-executor{{- end -}}

{{/* Secret that holds values given inline (SASL password, ClickHouse URL, command keys). */}}
{{- define "faultstream.secret" -}}{{ include "faultstream.fullname" . }}-secrets{{- end -}}

{{/* True (non-empty) when any inline secret value is set, so the chart makes its own Secret. */}}
{{- define "faultstream.inlineSecrets" -}}
{{- if or (and .Values.kafka.sasl.enabled (not .Values.kafka.sasl.existingSecret) .Values.kafka.sasl.password)
          (and (not .Values.clickhouse.existingSecret) .Values.clickhouse.credentialedUrl)
          (and (not .Values.commandKeys.existingSecret) .Values.commandKeys.keys) -}}
true
{{- end -}}
{{- end -}}

{{/* Where the command keys come from: name of a Secret holding the JSON key file, or "". */}}
{{- define "faultstream.commandKeySecret" -}}
{{- if .Values.commandKeys.existingSecret -}}{{ .Values.commandKeys.existingSecret }}
{{- else if .Values.commandKeys.keys -}}{{ include "faultstream.secret" . }}
{{- end -}}
{{- end -}}
{{- define "faultstream.commandKeySecretKey" -}}
{{- if .Values.commandKeys.existingSecret -}}{{ .Values.commandKeys.existingSecretKey }}{{- else -}}command-keys.json{{- end -}}
{{- end -}}

{{/* Checks of values that would otherwise fail late or leak a secret. */}}
{{- define "faultstream.validate" -}}
{{- if regexMatch "://[^/@]*@" (.Values.clickhouse.url | default "") -}}
{{- fail "clickhouse.url must not hold credentials: put a URL with user:password into a Secret (clickhouse.existingSecret) or clickhouse.credentialedUrl" -}}
{{- end -}}
{{- if and .Values.kafka.sasl.enabled (not .Values.kafka.sasl.existingSecret) (not .Values.kafka.sasl.password) -}}
{{- fail "kafka.sasl.enabled needs kafka.sasl.existingSecret (or kafka.sasl.password)" -}}
{{- end -}}
{{- if and .Values.kafka.sasl.enabled (not (has .Values.kafka.securityProtocol (list "SASL_PLAINTEXT" "SASL_SSL"))) -}}
{{- fail "kafka.sasl.enabled needs kafka.securityProtocol SASL_PLAINTEXT or SASL_SSL" -}}
{{- end -}}
{{- if and .Values.ui.enabled .Values.ui.allowCommands (not .Values.ui.tokens.existingSecret) -}}
{{- fail "ui.allowCommands needs ui.tokens.existingSecret (the logins of who may decide)" -}}
{{- end -}}
{{- if and .Values.ui.enabled .Values.ui.allowCommands (not (include "faultstream.commandKeySecret" .)) -}}
{{- fail "ui.allowCommands needs a command key (commandKeys.existingSecret)" -}}
{{- end -}}
{{- if and .Values.executors.kubernetes.enabled (not .Values.executors.kubernetes.clusters) -}}
{{- fail "executors.kubernetes.enabled needs executors.kubernetes.clusters (the cluster names it acts on)" -}}
{{- end -}}
{{- end -}}

{{/*
Kafka and ClickHouse connection environment shared by every faultstream container: endpoints
as plain values, the SASL password and a credentialed ClickHouse URL only through secretKeyRef.
(dict "root" $ "clickhouse" true) adds FAULTSTREAM_CLICKHOUSE.
*/}}
{{- define "faultstream.kafkaEnv" -}}
{{- $v := .root.Values -}}
- name: KAFKA_BOOTSTRAP_SERVERS
  value: {{ $v.kafka.bootstrapServers | quote }}
- name: KAFKA_SECURITY_PROTOCOL
  value: {{ $v.kafka.securityProtocol | quote }}
- name: FAULTSTREAM_TOPIC_PREFIX
  value: {{ $v.topicPrefix | quote }}
{{- if $v.kafka.sasl.enabled }}
- name: KAFKA_SASL_MECHANISM
  value: {{ $v.kafka.sasl.mechanism | quote }}
{{- if and $v.kafka.sasl.existingSecret $v.kafka.sasl.usernameKey }}
- name: KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $v.kafka.sasl.existingSecret }}
      key: {{ $v.kafka.sasl.usernameKey }}
{{- else }}
- name: KAFKA_SASL_USERNAME
  value: {{ required "kafka.sasl.username (or kafka.sasl.usernameKey of kafka.sasl.existingSecret)" $v.kafka.sasl.username | quote }}
{{- end }}
- name: KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $v.kafka.sasl.existingSecret | default (include "faultstream.secret" .root) }}
      key: {{ if $v.kafka.sasl.existingSecret }}{{ $v.kafka.sasl.passwordKey }}{{ else }}kafka-sasl-password{{ end }}
{{- end }}
{{- if $v.kafka.tls.caSecret }}
- name: KAFKA_SSL_CA_LOCATION
  value: /etc/faultstream/kafka-ca/{{ $v.kafka.tls.caKey }}
{{- end }}
{{- if .clickhouse }}
{{- if $v.clickhouse.existingSecret }}
- name: FAULTSTREAM_CLICKHOUSE
  valueFrom:
    secretKeyRef:
      name: {{ $v.clickhouse.existingSecret }}
      key: {{ $v.clickhouse.existingSecretKey }}
{{- else if $v.clickhouse.credentialedUrl }}
- name: FAULTSTREAM_CLICKHOUSE
  valueFrom:
    secretKeyRef:
      name: {{ include "faultstream.secret" .root }}
      key: clickhouse-url
{{- else }}
- name: FAULTSTREAM_CLICKHOUSE
  value: {{ $v.clickhouse.url | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The Kafka CA volume mount and volume (empty without kafka.tls.caSecret). */}}
{{- define "faultstream.kafkaCaMount" -}}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  mountPath: /etc/faultstream/kafka-ca
  readOnly: true
{{- end }}
{{- end -}}
{{- define "faultstream.kafkaCaVolume" -}}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.tls.caSecret }}
    items:
      - key: {{ .Values.kafka.tls.caKey }}
        path: {{ .Values.kafka.tls.caKey }}
{{- end }}
{{- end -}}

{{/* The command key file mount and volume (empty without a command key). */}}
{{- define "faultstream.commandKeyMount" -}}
{{- if include "faultstream.commandKeySecret" . }}
- name: command-keys
  mountPath: /etc/faultstream/command-keys
  readOnly: true
{{- end }}
{{- end -}}
{{- define "faultstream.commandKeyVolume" -}}
{{- if include "faultstream.commandKeySecret" . }}
- name: command-keys
  secret:
    secretName: {{ include "faultstream.commandKeySecret" . }}
    items:
      - key: {{ include "faultstream.commandKeySecretKey" . }}
        path: keys.json
{{- end }}
{{- end -}}
{{- define "faultstream.commandKeyEnv" -}}
{{- if include "faultstream.commandKeySecret" . }}
- name: FAULTSTREAM_COMMAND_KEY_FILE
  value: /etc/faultstream/command-keys/keys.json
{{- end }}
{{- end -}}

{{/* Container securityContext of every faultstream container: unprivileged, read-only root. */}}
{{- define "faultstream.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- define "faultstream.podSecurity" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.runAsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}
