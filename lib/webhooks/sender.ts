import { request as httpRequest, type IncomingMessage } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { isIP } from 'node:net'
import { Webhook } from 'standardwebhooks'
import { webhookAttemptSpan } from '../telemetry/spans.js'
import type { WebhookEndpoint } from '../tenants/tenant.js'
import type { AddressPolicy } from './address-policy.js'
import type { Delivery } from '../state/webhook-queue.js'

export type AttemptResult =
  | { ok: true, status: number }
  | { ok: false, error: string }

export interface SenderOptions {
  policy: AddressPolicy
  timeoutMs: number
  userAgent: string
}

/** An answer's body is read (so the connection ends cleanly) up to this much, and ignored. */
const MAX_ANSWER_BYTES = 64 * 1024

/**
 * The Standard Webhooks headers for one attempt: webhook-id (the event's, the same on every
 * attempt), webhook-timestamp (this attempt's) and webhook-signature (v1, HMAC-SHA256 by the
 * reference library over `id.timestamp.body`).
 */
export function signedHeaders (secret: string, delivery: Delivery, at: Date): Record<string, string> {
  return {
    'webhook-id': delivery.messageId,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': new Webhook(secret).sign(delivery.messageId, at, delivery.body)
  }
}

/**
 * One delivery attempt: a POST of the signed body, connected only to an address the policy
 * allows, within the attempt timeout. A 2xx answer is a success; anything else (another
 * status, a redirect, a refused address, a timeout, a reset) is a failure with its reason.
 */
export async function sendWebhook (endpoint: WebhookEndpoint, delivery: Delivery, options: SenderOptions, signal?: AbortSignal): Promise<AttemptResult> {
  return await webhookAttemptSpan(delivery, async (span) => {
    const result = await attempt(endpoint, delivery, options, span.inject, signal)
    span.settle(result.ok ? { status: result.status } : { error: result.error })
    return result
  })
}

async function attempt (endpoint: WebhookEndpoint, delivery: Delivery, options: SenderOptions, inject: (headers: Record<string, string>) => void, signal?: AbortSignal): Promise<AttemptResult> {
  const url = new URL(delivery.url)
  const urlRefusal = options.policy.urlRefusal(url)
  if (urlRefusal !== null) return { ok: false, error: `refused: ${urlRefusal}` }
  // An IP literal is connected to without a lookup: it is checked here instead.
  const literal = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  if (isIP(literal) !== 0) {
    const refusal = options.policy.addressRefusal(literal)
    if (refusal !== null) return { ok: false, error: `refused: ${refusal}` }
  }
  const body = Buffer.from(delivery.body)
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'content-length': String(body.length),
    'user-agent': options.userAgent,
    ...signedHeaders(endpoint.secret, delivery, new Date())
  }
  inject(headers)
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest
  return await new Promise<AttemptResult>((resolve) => {
    let settled = false
    const finish = (result: AttemptResult): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      signal?.removeEventListener('abort', onAbort)
      resolve(result)
    }
    const outgoing = send(url, { method: 'POST', headers, agent: false, lookup: options.policy.lookup }, (response: IncomingMessage) => {
      const status = response.statusCode ?? 0
      let received = 0
      response.on('data', (chunk: Buffer) => {
        received += chunk.length
        if (received > MAX_ANSWER_BYTES) response.destroy()
      })
      const done = (): void => { finish(status >= 200 && status < 300 ? { ok: true, status } : { ok: false, error: `HTTP ${status}` }) }
      response.on('end', done)
      response.on('close', done)
      response.on('error', done)
    })
    const timer = setTimeout(() => {
      finish({ ok: false, error: `no answer within ${options.timeoutMs} ms` })
      outgoing.destroy()
    }, options.timeoutMs)
    const onAbort = (): void => {
      finish({ ok: false, error: 'interrupted: the service is shutting down' })
      outgoing.destroy()
    }
    signal?.addEventListener('abort', onAbort)
    outgoing.on('error', (error: NodeJS.ErrnoException) => {
      finish({ ok: false, error: error.code === 'EWEBHOOKDESTINATION' ? `refused: ${error.message}` : `${error.code ?? 'error'}: ${error.message}` })
    })
    outgoing.end(body)
  })
}
