import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { perKey } from '../plugins/external/rate-limit.js'
import { apiError } from '../lib/errors.js'
import { SANDBOX_MESSAGES_PER_ADDRESS } from '../lib/state/sandbox-inbox.js'
import { SIMULATED_RECIPIENTS } from '../lib/mail/delivery/simulator.js'
import { commonErrors, errorResponses, inputErrors } from '../schemas/errors.js'
import { ref } from '../schemas/ref.js'
import { SandboxMessagesReply, SandboxQuery } from '../schemas/sandbox.js'

const simulated = Object.entries(SIMULATED_RECIPIENTS).map(([address, { description }]) => `\`${address}\`: ${description}.`).join(' ')

const sandboxRoutes: FastifyPluginAsyncTypebox = async function sandboxRoutes (fastify) {
  fastify.get('/sandbox/messages', {
    // A page's public key must not read codes: the inbox holds every sandbox code of the
    // tenant, its backend's included, and whoever copies the key from the page could verify them.
    config: { keyKinds: ['secret'], rateLimit: perKey(fastify.config.routeLimits.account) },
    schema: {
      operationId: 'listSandboxMessages',
      summary: 'Read the sandbox inbox of an address (optionally one dispatch\'s message)',
      description: `Sandbox (test) keys never send real mail: their messages are kept here for an hour, at most ${SANDBOX_MESSAGES_PER_ADDRESS} per address, newest first, for the same tenant only. Secret keys only (a restricted key gets 403 KEY_NOT_PERMITTED: a page's key must not read codes); live keys get 404. Reserved recipients simulate delivery outcomes: ${simulated}`,
      tags: ['sandbox'],
      security: [{ bearerAuth: [] }],
      querystring: SandboxQuery,
      response: {
        200: ref(SandboxMessagesReply, { description: 'The messages sandbox keys of this tenant sent to the address in the last hour, newest first (empty when none).' }),
        ...errorResponses([...commonErrors, ...inputErrors, 'INVALID_EMAIL', 'KEY_NOT_PERMITTED', 'NOT_FOUND'])
      }
    }
  }, async function listSandboxMessages (request) {
    const key = request.auth
    if (key === null) throw apiError('UNAUTHORIZED')
    return { success: true as const, data: { messages: await fastify.sandbox.list(key, request.query.email, request.query.requestId) } }
  })
}

export default sandboxRoutes
