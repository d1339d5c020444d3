/*
 * The ceiling: a bare Fastify 5 server whose one route does only what every dispatch does
 * before any work of its own (parse JSON, validate `{ email }` against a TypeBox schema,
 * serialise a small answer through a response schema). Started by bench/run.ts in its own
 * process; listens on 127.0.0.1:$PORT.
 */
import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'

const app = Fastify({
  logger: false,
  // The service's Ajv settings (app.ts): unknown fields are an error rather than dropped.
  ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } }
})

app.post('/otp/request', {
  schema: {
    body: Type.Object({ email: Type.String({ minLength: 1, maxLength: 1024 }) }, { additionalProperties: false }),
    response: {
      200: Type.Object({ success: Type.Boolean(), message: Type.String(), data: Type.Object({ requestId: Type.String() }) })
    }
  }
}, async () => ({ success: true, message: 'Verification code sent', data: { requestId: 'otp_AAAAAAAAAAAAAAAAAAAAAAAA' } }))

await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT) })
