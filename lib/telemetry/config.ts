import type { Env } from '../../schemas/env.js'

/** Tracing as the standard OTEL_* variables ask for it (see schemas/env.ts). */
export interface TracingConfig {
  serviceName: string
  /** Where spans are posted (OTLP over HTTP). */
  url: string
  protocol: 'http/protobuf' | 'http/json'
  headers: Record<string, string>
  sampler: { name: Env['OTEL_TRACES_SAMPLER'], ratio: number }
  batch: { scheduledDelayMillis: number, exportTimeoutMillis: number, maxQueueSize: number, maxExportBatchSize: number }
}

/** The traces URL when only OTEL_TRACES_EXPORTER=otlp is given: the specification's default. */
const DEFAULT_TRACES_URL = 'http://localhost:4318/v1/traces'

/**
 * Null when tracing is off: no endpoint and no OTEL_TRACES_EXPORTER=otlp, or
 * OTEL_TRACES_EXPORTER=none. `fail` reports a bad value as the configuration error it is.
 */
export function tracingConfig (env: Env, fail: (variable: string, problem: string) => Error): TracingConfig | null {
  if (env.OTEL_TRACES_EXPORTER === 'none') return null
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
  if (base === undefined && traces === undefined && env.OTEL_TRACES_EXPORTER !== 'otlp') return null
  // The signal-specific URL is taken as is; the base URL gets the signal's path appended.
  const url = traces ?? (base === undefined ? DEFAULT_TRACES_URL : `${base.replace(/\/+$/, '')}/v1/traces`)
  for (const [variable, value] of [['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', traces], ['OTEL_EXPORTER_OTLP_ENDPOINT', base]] as const) {
    if (value !== undefined && !URL.canParse(value)) throw fail(variable, 'must be an http:// or https:// URL')
  }
  return {
    serviceName: env.OTEL_SERVICE_NAME,
    url,
    protocol: env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL,
    headers: parseHeaders(env.OTEL_EXPORTER_OTLP_HEADERS, fail),
    sampler: { name: env.OTEL_TRACES_SAMPLER, ratio: env.OTEL_TRACES_SAMPLER_ARG === undefined ? 1 : Number(env.OTEL_TRACES_SAMPLER_ARG) },
    batch: {
      scheduledDelayMillis: env.OTEL_BSP_SCHEDULE_DELAY,
      exportTimeoutMillis: env.OTEL_BSP_EXPORT_TIMEOUT,
      maxQueueSize: env.OTEL_BSP_MAX_QUEUE_SIZE,
      maxExportBatchSize: Math.min(env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE, env.OTEL_BSP_MAX_QUEUE_SIZE)
    }
  }
}

/** `key=value,key2=value2`, values URL-encoded, as the OTLP exporter specification writes them. */
function parseHeaders (text: string | undefined, fail: (variable: string, problem: string) => Error): Record<string, string> {
  const headers: Record<string, string> = {}
  if (text === undefined) return headers
  for (const pair of text.split(',')) {
    if (pair.trim() === '') continue
    const equals = pair.indexOf('=')
    const name = equals < 0 ? '' : pair.slice(0, equals).trim().toLowerCase()
    let value: string
    try {
      value = decodeURIComponent(pair.slice(equals + 1).trim())
    } catch {
      value = '\n'
    }
    // The value is a secret: the error names the entry's position, never its text.
    if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name) || /[\r\n\0]/.test(value)) {
      throw fail('OTEL_EXPORTER_OTLP_HEADERS', 'must be comma-separated key=value pairs (values URL-encoded)')
    }
    headers[name] = value
  }
  return headers
}
