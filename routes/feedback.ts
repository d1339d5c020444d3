import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import { apiError } from '../lib/errors.js'
import { FeedbackRefused, FeedbackThrottled, FeedbackUnavailable } from '../lib/feedback/refusals.js'
import { CERT_FETCH_IPV6_PREFIX } from '../lib/feedback/sns-certificates.js'
import { isSnsEnvelope } from '../lib/feedback/sns-envelope.js'
import { sourceBucket } from '../lib/net/source-address.js'
import { UNIDENTIFIED_MESH_SOURCE } from '../lib/net/workload-identity.js'
import { toApiError } from '../plugins/errors.js'
import { connectionErrors, errorResponses } from '../schemas/errors.js'
import { FeedbackReply, SNS_BODY_LIMIT, SnsRequestBody } from '../schemas/recipients.js'
import { ref } from '../schemas/ref.js'

/**
 * The outcome counted for an answer the handler did not count: a refusal before it (the body's
 * shape, size or type: `malformed`, `PAYLOAD_TOO_LARGE`, `UNSUPPORTED_MEDIA_TYPE`…) or a
 * failure in it (a store that did not answer: `unavailable`, as SNS's retry is the same).
 */
function uncountedOutcome (error: Error): string {
  const { code } = toApiError(error)
  if (code === 'SNS_MESSAGE_INVALID') return 'malformed'
  return code === 'UNAVAILABLE' ? 'unavailable' : code
}

/**
 * POST /feedback/ses: the HTTPS subscription endpoint of the SNS topic that SES event
 * publishing writes to. No API key: SNS signs every message, and nothing is done before the
 * topic, the age, the certificate URL and the signature are checked.
 */
const feedbackRoutes: FastifyPluginAsync = async function feedbackRoutes (fastify) {
  const { metrics } = fastify
  /** Requests whose answer the handler counted; every other error answer came before it. */
  const counted = new WeakSet<FastifyRequest>()
  const count = (request: FastifyRequest, outcome: string): void => {
    counted.add(request)
    metrics.sesFeedback.inc({ outcome })
  }
  // SNS posts JSON as text/plain; it is parsed here, in this scope only, and only when it has
  // an envelope's shape: anyone may post 256 KiB here, and JSON.parse of 256 KiB of `[`, or of
  // 22,500 made-up fields, took every tenant's event loop.
  fastify.removeContentTypeParser(['text/plain', 'application/json'])
  fastify.addContentTypeParser(['text/plain', 'application/json'], { parseAs: 'string', bodyLimit: SNS_BODY_LIMIT }, (_request, body, done) => {
    if (!isSnsEnvelope(body as string)) {
      done(apiError('SNS_MESSAGE_INVALID', 'The body is not an SNS message: a JSON object of SNS\'s own fields, each once'), undefined)
      return
    }
    done(null, JSON.parse(body as string))
  })
  fastify.post('/feedback/ses', {
    bodyLimit: SNS_BODY_LIMIT,
    // No key: each of its refusals (a malformed body included) is paced per source like a 401,
    // an IPv6 source per /48 as for its certificate fetches: a /48 is free to have.
    config: { paceRefusals: 'every-4xx', paceIpv6Prefix: CERT_FETCH_IPV6_PREFIX },
    // A refusal before the handler is an answer too, and the one a flood of junk gets.
    onError (request, _reply, error, done) {
      if (!counted.has(request)) metrics.sesFeedback.inc({ outcome: uncountedOutcome(error) })
      done()
    },
    // The body schema is the document's: the message is checked by the feedback receiver,
    // whose refusals carry SNS's own codes, and the text/plain form is a string only before
    // the parser above has read it.
    validatorCompiler: () => () => true,
    schema: {
      operationId: 'receiveSesFeedback',
      summary: 'SES delivery events, as an SNS HTTPS subscription',
      description: 'Subscribe this URL to the SNS topic(s) of SES_FEEDBACK_TOPIC_ARNS that the SES configuration set (SES_CONFIGURATION_SET) publishes Delivery, DeliveryDelay, Bounce and Complaint events to. SNS sends JSON as `text/plain`. A message of another topic, older than an hour, with a signing certificate URL not matching SNS_SIGNING_CERT_URL_PATTERN (or longer than 256 characters, not https on port 443, naming an IP address, or not in its canonical form), or whose signature (version 1 or 2) does not verify is refused and changes nothing; a MessageId is handled once. A body is parsed only when it has the shape of an SNS message (a JSON object of SNS\'s own fields, each at most once, each a string but `MessageAttributes`: at most 10 attributes, each of `Type` and `Value`); bodies up to 256 KiB are read (an SES event is a few KiB). Every 4xx here counts in the refusal pace of its sender (an IPv6 sender per /48), and so does a 503 for a certificate the sender named that failed or cannot be fetched now; a 503 of the service\'s own trouble (Redis, a subscription not confirmed) does not. A certificate not fetched yet is fetched within bounds: 429 when the sender asked for too many new ones, 503 (SNS retries) when a fetch of the sender is under way (each address, IPv6 /48 or mesh workload has one at a time; every caller through the sidecar without an identity is one sender), too many are being fetched, or one just failed. Subscription confirmations are confirmed for the listed topics only. Events become the tenant\'s `delivery.*` webhooks; a permanent bounce or a complaint suppresses the mailbox.',
      tags: ['feedback'],
      security: [],
      body: SnsRequestBody,
      response: {
        200: ref(FeedbackReply, { description: 'Handled, confirmed, a duplicate, or nothing the service sent.' }),
        ...errorResponses([...connectionErrors, 'INTERNAL', 'SNS_MESSAGE_INVALID', 'SNS_MESSAGE_STALE', 'SNS_TOPIC_NOT_ALLOWED', 'SNS_CERT_URL_NOT_ALLOWED', 'SNS_SIGNATURE_INVALID', 'PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE', 'UNAVAILABLE'])
      }
    }
  }, async function receive (request) {
    const { feedback } = fastify
    // Every caller through the sidecar without an identity is one source: charging SNS's
    // fetches to its tokens would let one stranger spend them; it holds one fetch at most.
    const source = request.meshSource ?? sourceBucket(request.clientAddress, Math.min(fastify.config.ipv6BucketPrefix, CERT_FETCH_IPV6_PREFIX)) ?? request.clientAddress
    try {
      const outcome = await feedback.receive(request.body, { source, spendsTokens: source !== UNIDENTIFIED_MESH_SOURCE })
      count(request, outcome)
      return { success: true as const, message: outcome }
    } catch (error) {
      if (error instanceof FeedbackRefused) {
        count(request, error.code)
        request.log.warn({ code: error.code }, 'SNS message refused')
        throw apiError(error.code)
      }
      if (error instanceof FeedbackThrottled) {
        count(request, 'throttled')
        request.log.warn({ err: error }, 'SNS message not handled; its source asked for too many new certificates')
        throw apiError('RATE_LIMITED', undefined, { 'retry-after': String(error.retryAfterSeconds) })
      }
      if (error instanceof FeedbackUnavailable) {
        count(request, 'unavailable')
        // The sender's own 503 (a certificate it named that cannot be had now) is paced like
        // its 4xx: anyone may post it again at once, and each costs its body's reading. SNS
        // loses nothing by the hold, as it retries a 5xx after its own backoff.
        request.pacedAsRefusal = error.sendersOwn
        // A failed certificate URL was logged once, when its fetch failed (lib/compose.ts):
        // each message naming it for the next minute is counted only. No stack: nothing failed here.
        if (error.reason !== 'certificate-failed') request.log.warn({ reason: error.message }, 'SNS message not handled; SNS will retry')
        const unavailable = apiError('UNAVAILABLE')
        unavailable.logged = true
        throw unavailable
      }
      throw error
    }
  })
}

export default feedbackRoutes
