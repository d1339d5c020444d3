import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, isSpanContextValid, propagation, trace, type Attributes, type Link, type Span } from '@opentelemetry/api'

/**
 * The spans of our own (a mail send, a webhook attempt) and the trace context a queued webhook
 * carries. Only the OpenTelemetry API is used here: with tracing off (lib/telemetry/tracing.ts
 * never loaded) every call is the API's no-op, and no span records anything. Attributes name
 * tenants, modes, request ids, transports and event types, never an address, a code, a key, a
 * receipt or a secret.
 */
const tracer = trace.getTracer('email-otp')

/**
 * Set by lib/telemetry/tracing.ts when it starts the SDK. Until then our spans are skipped
 * outright: even the API's no-op span costs a microsecond per call.
 */
let enabled = false
export function enableSpans (): void {
  enabled = true
}

/** The active span's context as a W3C `traceparent`, or undefined when there is none. */
export function currentTraceparent (): string | undefined {
  if (!enabled) return undefined
  const span = trace.getActiveSpan()
  if (span === undefined) return undefined
  const { traceId, spanId, traceFlags } = span.spanContext()
  if (!isSpanContextValid(span.spanContext())) return undefined
  return `00-${traceId}-${spanId}-${(traceFlags & 0xff).toString(16).padStart(2, '0')}`
}

/** A link to the span a `traceparent` names (the request that caused the work), if it is one. */
function linkTo (traceparent: string | undefined): Link[] {
  if (traceparent === undefined) return []
  const linked = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, { traceparent }))
  return linked !== undefined && isSpanContextValid(linked) ? [{ context: linked }] : []
}

/**
 * Runs `work` in a span of its own. A failure sets the span's status to the `failure` text it
 * gives (never the error's message, which may quote a provider's reply naming the recipient).
 */
async function inSpan<T> (
  name: string,
  options: { kind: SpanKind, attributes: Attributes, root?: boolean, links?: Link[] },
  work: (span: Span) => Promise<T>,
  failure: (error: unknown) => string
): Promise<T> {
  return await tracer.startActiveSpan(name, options, async (span) => {
    try {
      return await work(span)
    } catch (error) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: failure(error) })
      throw error
    } finally {
      span.end()
    }
  })
}

/** One message handed to a mail transport (`ses`, `smtp`, `log`). */
export async function mailSendSpan<T> (transport: string, attributes: { tenant: string, mode: string, requestId: string }, send: () => Promise<T>, failureKind: (error: unknown) => string): Promise<T> {
  if (!enabled) return await send()
  return await inSpan(`mail send ${transport}`, {
    kind: SpanKind.CLIENT,
    attributes: {
      'email_otp.mail.transport': transport,
      'email_otp.tenant': attributes.tenant,
      'email_otp.mode': attributes.mode,
      'email_otp.request_id': attributes.requestId
    }
  }, async (span) => {
    try {
      return await send()
    } catch (error) {
      span.setAttribute('email_otp.mail.failure', failureKind(error))
      throw error
    }
  }, failureKind)
}

export interface WebhookAttemptSpan {
  /** Adds the attempt's trace context to the outgoing headers (`traceparent`). */
  inject: (headers: Record<string, string>) => void
  /** The attempt's outcome: an HTTP status, or why it failed. */
  settle: (outcome: { status: number } | { error: string }) => void
}

const UNTRACED: WebhookAttemptSpan = { inject: () => {}, settle: () => {} }

/**
 * One webhook delivery attempt: the root of a trace of its own (attempts run long after the
 * request that queued the event, and there may be many), linked to that request's span.
 */
export async function webhookAttemptSpan<T> (
  delivery: { tenant: string, type: string, messageId: string, attempts: number, url: string, traceparent?: string },
  attempt: (span: WebhookAttemptSpan) => Promise<T>
): Promise<T> {
  if (!enabled) return await attempt(UNTRACED)
  return await inSpan(`webhook ${delivery.type}`, {
    kind: SpanKind.PRODUCER,
    root: true,
    links: linkTo(delivery.traceparent),
    attributes: {
      'email_otp.tenant': delivery.tenant,
      'email_otp.webhook.type': delivery.type,
      'email_otp.webhook.id': delivery.messageId,
      'email_otp.webhook.attempt': delivery.attempts + 1,
      // The host only: an endpoint's path or query may hold the receiver's own token.
      'server.address': hostOf(delivery.url)
    }
  }, async (span) => await attempt({
    inject: (headers) => { propagation.inject(context.active(), headers) },
    settle: (outcome) => {
      if ('status' in outcome) span.setAttribute('http.response.status_code', outcome.status)
      if ('error' in outcome) span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error })
    }
  }), () => 'attempt failed')
}

function hostOf (url: string): string {
  try {
    return new URL(url).hostname
  } catch {
    return 'invalid'
  }
}
