{{/*
Which GPUs of every node the components use: INCLUDE_DEVICES and
EXCLUDE_DEVICES from `includeDevices` and `excludeDevices` (a comma string or
a list of GPU indexes, GPU- UUIDs and PCI bus IDs). The plugin, GFD and the
MPS daemon get the same two variables, so a GPU left out is neither served,
labelled nor shared. Unset values render nothing: the per-node config file
(flags.plugin.includeDevices/excludeDevices) then decides.
*/}}
{{- define "nvidia-device-plugin.deviceSelectionEnv" -}}
{{- range $name, $value := dict "INCLUDE_DEVICES" .Values.includeDevices "EXCLUDE_DEVICES" .Values.excludeDevices }}
{{- if kindIs "slice" $value }}
- name: {{ $name }}
  value: {{ join "," $value | quote }}
{{- else if kindIs "string" $value }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end -}}
